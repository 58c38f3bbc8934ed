// grid.wstack and degrid.wstack, cuda backends, against their cpu backends (the reference, itself
// tested against a direct DFT in wstack_test): the simulator's SKA1-Low array (several blocks,
// weights, random skies) on a 43-degree field (the visibilities reach every grid row) and a
// 1.4-degree one (a band of rows: the pruned FFTs), paddings 2 and 1.5 (grids of 512 and 384), for
// epsilon 1e-2 to 1e-5. The two backends make the same approximation in different orders (atomics,
// screens evaluated per pixel, cuFFT against FFTW), so they differ by rounding only: relative L2
// difference below epsilon / 5. Measured on the H100: gridder 1.5e-7 to 4.5e-7 on the wide field,
// up to 6.6e-6 on the narrow one (padding 1.5, epsilon 1e-4), where the visibilities crowd the
// grid's centre and the grid is accumulated in single precision (above epsilon 1e-5), 1.1e-7 to
// 5.1e-7 at 1e-5 (double); degridder 3.6e-8 to 1.3e-7.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <random>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/units.hpp"
#include "stages/degrid/wstack.hpp"
#include "stages/grid/wstack.hpp"
#include "stages/io/simulate.hpp"
#include "tests/support/edited_block.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/seeds.hpp"

using namespace uvflow;

namespace {

class GpuWStack : public test::GpuTest {
 protected:
  std::vector<std::shared_ptr<const VisBlock>> simulated(double cell_arcsec, int npix, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> pos(-0.5, 0.5), flux(0.5, 2);
    std::vector<Record> recs;
    for (int i = 0; i < 8; ++i)
      recs.push_back({{"l_deg", pos(rng) * npix * cell_arcsec / 3600}, {"m_deg", pos(rng) * npix * cell_arcsec / 3600},
                      {"flux_jy", flux(rng)}});
    StageHarness sim(io_simulate::spec(), "cpu", {{"preset", std::string("tiny")}, {"sky", recs}});
    sim.run_source();
    std::vector<std::shared_ptr<const VisBlock>> out;
    for (auto& p : sim.outputs("vis")) out.push_back(std::dynamic_pointer_cast<const VisBlock>(p));
    return out;
  }

  std::vector<float> image_of(const std::string& backend, const grid_wstack::Params& p,
                              const std::vector<std::shared_ptr<const VisBlock>>& blocks) {
    StageHarness h(grid_wstack::spec(), backend, grid_wstack::decl, p);
    for (auto& b : blocks) h.process({{"vis", backend == "cuda" ? moved(b, Location::device) : b}});
    h.finish();
    auto img = h.output<Image>("image");
    if (backend == "cuda") img = moved(img, Location::host);
    return {img->pixels.begin(), img->pixels.end()};
  }
};

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += double(a[i] - ref[i]) * (a[i] - ref[i]), r += double(ref[i]) * ref[i];
  return std::sqrt(d / r);
}

}  // namespace

TEST_F(GpuWStack, GridderMatchesCpuBackend) {
  for (auto seed : test::seeds(14)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    for (auto [npix, cell] : {std::pair{256, 600.0}, std::pair{256, 20.0}}) {
      const auto blocks = simulated(cell, npix, seed);
      for (double padding : {2.0, 1.5})  // grids of 512 and 384 cells
        for (double eps : {1e-2, 1e-3, 1e-4, 1e-5}) {
          const grid_wstack::Params p{.image_size = npix, .cell_arcsec = cell, .epsilon = eps, .padding = padding};
          const auto cpu = image_of("cpu", p, blocks), gpu = image_of("cuda", p, blocks);
          const double d = rel_l2(gpu, cpu);
          std::printf("grid.wstack cuda vs cpu, %d px of %.0f\", padding %.1f, eps %.0e: rel L2 %.2e\n", npix, cell, padding,
                      eps, d);
          EXPECT_LE(d, eps / 5);
        }
    }
  }
}

// pass_visibilities on cuda: passes after every third of the stream, at a fixed padding and at
// padding 0, against one pass on cuda and, at the fixed padding, against the cpu backend's passes
// (the same planes; at padding 0 each backend's cost model may choose another padding: measured
// 1.6e-4 apart at epsilon 1e-3, both within it of the DFT).
TEST_F(GpuWStack, PassesMatchCpuBackendAndOnePass) {
  for (auto seed : test::seeds(17)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto blocks = simulated(600.0, 256, seed);
    std::int64_t n = 0;
    for (auto& b : blocks) n += std::int64_t(b->size());
    for (double padding : {2.0, 0.0}) {
      grid_wstack::Params p{.image_size = 256, .cell_arcsec = 600.0, .epsilon = 1e-3, .padding = padding};
      const auto one = image_of("cuda", p, blocks);
      p.pass_visibilities = n / 3 + 1;
      const auto cpu = image_of("cpu", p, blocks), gpu = image_of("cuda", p, blocks);
      std::printf("grid.wstack in passes of %lld, padding %g: cuda vs cpu rel L2 %.2e, vs one pass on cuda %.2e\n",
                  (long long)p.pass_visibilities, padding, rel_l2(gpu, cpu), rel_l2(gpu, one));
      if (padding != 0) {
        EXPECT_LE(rel_l2(gpu, cpu), p.epsilon / 5);
      }
      EXPECT_LE(rel_l2(gpu, one), 2 * p.epsilon);
      EXPECT_GT(rel_l2(gpu, one), 0);  // the passes were made
    }
  }
}

// A non-finite value or weight of a visibility that has weight would make its tile's fixed-point
// scale meaningless: the cuda backend counts such visibilities as it stages them and raises an
// InputError when the stream ends (the cpu backend names the first one at its block, wstack_test);
// a visibility of weight 0 adds nothing, whatever its value, on both.
TEST_F(GpuWStack, NonFiniteValueOrWeightIsAnInputError) {
  auto blocks = simulated(600.0, 256, 19);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto with = [&](std::size_t at, cfloat value, float weight) {
    auto out = blocks;
    out[1] = test::with_value(*blocks[1], at, value, weight);
    return out;
  };
  const grid_wstack::Params p{.image_size = 256, .cell_arcsec = 600.0, .epsilon = 1e-3};
  try {
    image_of("cuda", p, with(7, cfloat(nan, 0), 1.f));
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "grid.wstack: 1 visibilities have a non-finite uvw, or a non-finite value or weight");
  }
  const auto zero_weight = with(7, cfloat(nan, nan), 0.f);
  const auto gpu = image_of("cuda", p, zero_weight), cpu = image_of("cpu", p, zero_weight);
  EXPECT_LE(rel_l2(gpu, cpu), p.epsilon / 5);
}

TEST_F(GpuWStack, DegridderMatchesCpuBackend) {
  for (auto seed : test::seeds(41)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const int npix = 256;
    // Wide: the visibilities reach every grid row; narrow: a band of the rows (the pruned FFT).
    for (const double cell : {600.0, 20.0}) {
      const auto blocks = simulated(cell, npix, seed);
      // A model: the cpu dirty image of the same blocks.
      StageHarness h(grid_wstack::spec(), "cpu", grid_wstack::decl, {.image_size = npix, .cell_arcsec = cell});
      for (auto& b : blocks) h.process({{"vis", b}});
      h.finish();
      auto model = h.output<Image>("image");
      for (double eps : {1e-2, 1e-3, 1e-4, 1e-5}) {
        const degrid_wstack::Params p{.epsilon = eps, .padding = 2.0};
        StageHarness cpu(degrid_wstack::spec(), "cpu", degrid_wstack::decl, p);
        StageHarness gpu(degrid_wstack::spec(), "cuda", degrid_wstack::decl, p);
        cpu.set_input("model", model);
        gpu.set_input("model", moved(model, Location::device));
        double d = 0, r = 0;
        for (auto& b : blocks) {
          cpu.process({{"vis", b}});
          gpu.process({{"vis", moved(b, Location::device)}});
        }
        for (std::size_t k = 0; k < blocks.size(); ++k) {
          auto a = cpu.output<VisBlock>("vis", k);
          auto g = moved(gpu.output<VisBlock>("vis", k), Location::host);
          ASSERT_EQ(a->size(), g->size());
          for (std::size_t i = 0; i < a->size(); ++i)
            d += std::norm(std::complex<double>(g->vis[i]) - std::complex<double>(a->vis[i])),
                r += std::norm(std::complex<double>(a->vis[i]));
        }
        std::printf("degrid.wstack cuda vs cpu, %d px of %.0f\", eps %.0e: rel L2 %.2e\n", npix, cell, eps, std::sqrt(d / r));
        EXPECT_LE(std::sqrt(d / r), eps / 5);
      }
    }
  }
}
