// degrid.wproj, cuda backend (both variants), against its cpu backend (which degrid_test.cpp checks
// against the serial reference, the adjoint identity and a direct DFT): the same random grids and
// visibilities, raw and placed by uvw.w_sort on the device. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <random>

#include "runtime/harness.hpp"
#include "stages/degrid/wproj.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/degrid_cases.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/wproj_stack.hpp"

using namespace uvflow;

namespace {

class DegridGpu : public test::GpuTest, public ::testing::WithParamInterface<const char*> {
 protected:
  std::shared_ptr<const VisBlock> degrid(const std::string& backend, std::shared_ptr<const Grid> g,
                                         std::shared_ptr<const KernelStack> ks, std::shared_ptr<const VisBlock> b) {
    StageHarness h(degrid_wproj::spec(), backend, degrid_wproj::decl,
                   degrid_wproj::Params{.variant = backend == "cpu" ? "uvflow" : GetParam()});
    h.set_input("grid", g);
    h.set_input("kernels", ks);
    h.process({{"vis", b}});
    return h.output<VisBlock>("vis");
  }
};

TEST_P(DegridGpu, MatchesTheCpuBackendRawAndPlaced) {
  for (int oversample : {4, 16}) {
    auto ks = test::wproj_stack(160, 45, oversample, 1.2, 500);
    auto dks = moved(ks, Location::device);
    for (std::uint64_t seed : test::seeds(5)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", oversample " + std::to_string(oversample));
      std::mt19937_64 rng(seed);
      std::shared_ptr<const VisBlock> v = test::random_block(*ks, 20000, rng);
      std::shared_ptr<const Grid> g = test::random_grid(*ks, rng);
      auto dg = moved(g, Location::device);
      const auto ref = degrid("cpu", g, ks, v);

      StageHarness sort(uvw_w_sort::spec(), "cuda");
      sort.set_input("kernels", dks);
      sort.process({{"vis", moved(v, Location::device)}});
      auto placed = sort.output<VisBlock>("vis");
      auto placed_host = moved(placed, Location::host);
      const auto placed_ref = degrid("cpu", g, ks, placed_host);

      for (auto [dev, want] : {std::pair{moved(v, Location::device), ref}, std::pair{placed, placed_ref}}) {
        auto out = moved(degrid("cuda", dg, dks, dev), Location::host);
        ASSERT_EQ(out->size(), want->size());
        double err = 0, norm = 0;
        for (std::size_t i = 0; i < out->size(); ++i) {
          err += std::norm(std::complex<double>(out->vis[i]) - std::complex<double>(want->vis[i]));
          norm += std::norm(std::complex<double>(want->vis[i]));
        }
        EXPECT_LT(std::sqrt(err / norm), 1e-5);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, DegridGpu, ::testing::Values("uvflow", "gather"));

}  // namespace
