// The prediction chain's cuda backends against their cpu backends (degrid_test.cpp checks those
// against the serial reference, the adjoint identity and a direct DFT): degrid.wproj, every
// variant, on the same random grids and visibilities, raw and placed by uvw.w_sort on the device,
// on baseline tracks in the simulator's [dump][baseline] order (the moving window's case), on
// dense clusters of one w-plane (the uvflow variant's groups), on entries repeated at one uvw
// (predicted once per group key) and on random kernels with supports up to 48; fft.image_to_grid
// on random images. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <complex>
#include <numbers>
#include <random>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/degrid/wproj.hpp"
#include "stages/fft/image_to_grid.hpp"
#include "stages/grid/serial.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/degrid_cases.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/wproj_stack.hpp"

using namespace uvflow;

namespace {

template <class T>
double relative_rms(const Array<T>& got, const Array<T>& want) {
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err += std::norm(std::complex<double>(got[i]) - std::complex<double>(want[i]));
    norm += std::norm(std::complex<double>(want[i]));
  }
  return std::sqrt(err / norm);
}

// Antenna pairs and non-decreasing times for a block in any order (the moving window's input
// check needs them; its result does not depend on them).
void label(VisBlock& b, std::mt19937_64& rng) {
  const std::size_t n = b.size();
  b.antenna1 = Array<std::int32_t>::host(n);
  b.antenna2 = Array<std::int32_t>::host(n);
  b.time = Array<double>::host(n);
  std::uniform_int_distribution<int> ant(0, 39);
  for (std::size_t i = 0; i < n; ++i) {
    b.antenna1[i] = ant(rng);
    b.antenna2[i] = ant(rng);
    b.time[i] = double(i / 500);
  }
}

// `baselines` tracks over `dumps` dumps in the simulator's [dump][baseline] order: each baseline
// turns on an ellipse in uv by about a third of a cell per dump, its w swinging with it.
std::shared_ptr<VisBlock> tracks(const KernelStack& ks, int baselines, int dumps, std::mt19937_64& rng) {
  const double scale = ks.geom.scale(), reach = 0.4 * ks.geom.grid_size / scale;
  std::uniform_real_distribution<double> radius(0.02 * reach, reach), angle(0, 2 * std::numbers::pi),
      wfrac(-1, 1), amp(-1, 1);
  std::vector<double> r(baselines), a0(baselines), wa(baselines);
  for (int b = 0; b < baselines; ++b) r[b] = radius(rng), a0[b] = angle(rng), wa[b] = wfrac(rng) * ks.max_w;
  auto v = std::make_shared<VisBlock>();
  const std::size_t n = std::size_t(baselines) * dumps;
  v->uu = Array<float>::host(n);
  v->vv = Array<float>::host(n);
  v->ww = Array<float>::host(n);
  v->vis = Array<cfloat>::host(n);
  v->weight = Array<float>::host(n);
  v->antenna1 = Array<std::int32_t>::host(n);
  v->antenna2 = Array<std::int32_t>::host(n);
  v->time = Array<double>::host(n);
  for (int d = 0; d < dumps; ++d)
    for (int b = 0; b < baselines; ++b) {
      const std::size_t i = std::size_t(d) * baselines + b;
      const double t = a0[b] + d * 0.3 / (r[b] * scale);
      v->uu[i] = float(r[b] * std::cos(t));
      v->vv[i] = float(0.8 * r[b] * std::sin(t));
      v->ww[i] = float(wa[b] * std::sin(t));
      v->vis[i] = cfloat(float(amp(rng)), float(amp(rng)));
      v->weight[i] = 1;
      v->antenna1[i] = b / 64;
      v->antenna2[i] = 64 + b % 64;
      v->time[i] = 100.0 * d;
    }
  return v;
}

// Dense clusters (the uvflow variant's groups: many visibilities of one w-plane within a few cells
// of each other, in both signs of w, so conjugated and plain kernels mix in a group), a few
// visibilities beyond the grid edge (they predict 0) and clusters straddling w-plane boundaries.
std::shared_ptr<VisBlock> clusters(const KernelStack& ks, std::size_t n, std::mt19937_64& rng) {
  const double scale = ks.geom.scale(), reach = 0.35 * ks.geom.grid_size / scale, cell = 1 / scale;
  std::uniform_real_distribution<double> centre(-reach, reach), near(-6 * cell, 6 * cell), unit(0, 1), amp(-1, 1);
  std::vector<std::array<double, 3>> c(7);
  for (auto& x : c) x = {centre(rng), centre(rng), unit(rng) * ks.max_w};
  auto v = test::random_block(ks, n, rng);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& k = c[i % c.size()];
    const double far = i % 97 == 0 ? 0.6 * ks.geom.grid_size / scale : 0;  // off the grid
    v->uu[i] = float(k[0] + near(rng) + far);
    v->vv[i] = float(k[1] + near(rng));
    v->ww[i] = float((unit(rng) < 0.5 ? -1 : 1) * k[2] * (1 + 0.05 * amp(rng)));
  }
  return v;
}

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

  bool windowed() const { return std::string(GetParam()) == "moving_window"; }
};

TEST_P(DegridGpu, MatchesTheCpuBackendRawAndPlaced) {
  for (int oversample : {4, 16}) {
    auto ks = test::wproj_stack(160, 45, oversample, 1.2, 500);
    auto dks = moved(ks, Location::device);
    for (std::uint64_t seed : test::seeds(5)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", oversample " + std::to_string(oversample));
      std::mt19937_64 rng(seed);
      std::shared_ptr<VisBlock> v = test::random_block(*ks, 20000, rng);
      label(*v, rng);
      std::shared_ptr<const Grid> g = test::random_grid(*ks, rng);
      auto dg = moved(g, Location::device);
      const auto ref = degrid("cpu", g, ks, v);

      // Placed in the input's order within planes, or in cell order (which the uvflow walker takes
      // as its locality order instead of sorting the block).
      auto place = [&](std::shared_ptr<const VisBlock> raw, std::string within = "input") {
        StageHarness sort(uvw_w_sort::spec(), "cuda", {{"within_plane", within}});
        sort.set_input("kernels", dks);
        sort.process({{"vis", moved(raw, Location::device)}});
        return sort.output<VisBlock>("vis");
      };
      auto placed = place(v);

      std::shared_ptr<const VisBlock> track = tracks(*ks, 256, 40, rng);
      const auto track_ref = degrid("cpu", g, ks, track);
      std::shared_ptr<VisBlock> dense = clusters(*ks, 20000, rng);
      label(*dense, rng);
      const auto dense_ref = degrid("cpu", g, ks, dense);
      std::shared_ptr<VisBlock> repeats = test::repeated_block(*ks, 2000, 20, rng);
      label(*repeats, rng);
      const auto repeats_ref = degrid("cpu", g, ks, repeats);

      std::vector<std::pair<std::shared_ptr<const VisBlock>, std::shared_ptr<const VisBlock>>> cases = {
          {moved(std::shared_ptr<const VisBlock>(v), Location::device), ref},
          {moved(track, Location::device), track_ref},
          {moved(std::shared_ptr<const VisBlock>(dense), Location::device), dense_ref},
          {moved(std::shared_ptr<const VisBlock>(repeats), Location::device), repeats_ref}};
      if (windowed())  // uvw.w_sort drops the antennas: the window cannot group its output
        EXPECT_THROW(degrid("cuda", dg, dks, placed), InputError);
      else
        for (auto p : {placed, place(dense), place(repeats), place(v, "cell"), place(dense, "cell"),
                       place(repeats, "cell")})
          cases.push_back({p, degrid("cpu", g, ks, moved(p, Location::host))});
      for (auto& [dev, want] : cases) {
        auto out = moved(degrid("cuda", dg, dks, dev), Location::host);
        ASSERT_EQ(out->size(), want->size());
        EXPECT_LT(relative_rms(out->vis, want->vis), 1e-5);
      }
    }
  }
}

// <degrid(G), V> = <G, grid(V)> with the degridding done on the device by this variant and the
// gridding by grid.serial on the host (unit weights): each cuda design is the adjoint of gridding
// itself, not only through the cpu backend it equals.
TEST_P(DegridGpu, IsTheAdjointOfGridding) {
  auto ks = test::wproj_stack(128, 60, 8, 1.2, 400);
  auto dks = moved(ks, Location::device);
  for (std::uint64_t seed : test::seeds(20261124)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::shared_ptr<VisBlock> v = test::random_block(*ks, 5000, rng);
    label(*v, rng);
    std::shared_ptr<const Grid> g = test::random_grid(*ks, rng);
    auto pred = moved(degrid("cuda", moved(g, Location::device), dks, moved(std::shared_ptr<const VisBlock>(v), Location::device)),
                      Location::host);
    StageHarness gr(grid_serial::spec(), "cpu");
    gr.set_input("kernels", ks);
    gr.process({{"vis", std::shared_ptr<const VisBlock>(v)}});
    gr.finish();
    auto gridded = gr.output<Grid>("grid");
    std::complex<double> lhs = 0, rhs = 0;
    for (std::size_t i = 0; i < v->size(); ++i)
      lhs += std::conj(std::complex<double>(pred->vis[i])) * std::complex<double>(v->vis[i]);
    for (std::size_t c = 0; c < g->cells.size(); ++c)
      rhs += std::conj(std::complex<double>(g->cells[c])) * std::complex<double>(gridded->cells[c]);
    EXPECT_LT(std::abs(lhs - rhs), 1e-5 * std::abs(rhs)) << lhs << " vs " << rhs;
  }
}

// Wide and narrow footprints: random kernels of supports 0 to 48 (rows of up to 97 values), at
// random and in dense clusters, so that the uvflow walker's unions are 1 to over 100 columns wide
// and its passes of 32, 16 and 8 lanes all occur (the stacks above have supports of 4 and 5 only).
TEST_P(DegridGpu, WideFootprintsMatchTheCpuBackend) {
  for (std::uint64_t seed : test::seeds(20261204)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::shared_ptr<const KernelStack> ks = test::random_kernel_stack(rng, 6, 48, 4, 512);
    auto dks = moved(ks, Location::device);
    std::shared_ptr<const Grid> g = test::random_grid(*ks, rng);
    auto dg = moved(g, Location::device);
    for (std::shared_ptr<VisBlock> v : {test::random_block(*ks, 3000, rng), clusters(*ks, 6000, rng)}) {
      label(*v, rng);
      const auto want = degrid("cpu", g, ks, v);
      auto out = moved(degrid("cuda", dg, dks, moved(std::shared_ptr<const VisBlock>(v), Location::device)),
                       Location::host);
      ASSERT_EQ(out->size(), want->size());
      EXPECT_LT(relative_rms(out->vis, want->vis), 1e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, DegridGpu, ::testing::Values("uvflow", "gather", "scatter", "moving_window"));

class DegridGpuInput : public test::GpuTest {};

// kernel_lookup linear (the bilinear table lookup predict.yaml ships): the uvflow variant equals the
// cpu backend on raw and w-sorted blocks; the other variants refuse it rather than ignore it.
TEST_F(DegridGpuInput, LinearLookupMatchesTheCpuBackend) {
  auto ks = test::wproj_stack(160, 45, 16, 2.0, 500);
  auto dks = moved(ks, Location::device);
  auto run = [&](const std::string& backend, std::shared_ptr<const Grid> g, std::shared_ptr<const KernelStack> k,
                 std::shared_ptr<const VisBlock> b) {
    StageHarness h(degrid_wproj::spec(), backend, degrid_wproj::decl, degrid_wproj::Params{.kernel_lookup = "linear"});
    h.set_input("grid", g);
    h.set_input("kernels", k);
    h.process({{"vis", b}});
    return h.output<VisBlock>("vis");
  };
  for (std::uint64_t seed : test::seeds(8)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::shared_ptr<const VisBlock> v = test::random_block(*ks, 20000, rng);
    std::shared_ptr<const Grid> g = test::random_grid(*ks, rng);
    auto dg = moved(g, Location::device);
    StageHarness sort(uvw_w_sort::spec(), "cuda");
    sort.set_input("kernels", dks);
    sort.process({{"vis", moved(v, Location::device)}});
    auto placed = sort.output<VisBlock>("vis");
    for (auto [dev, host] : {std::pair{moved(v, Location::device), v}, std::pair{placed, moved(placed, Location::host)}}) {
      auto want = run("cpu", g, ks, host);
      auto out = moved(run("cuda", dg, dks, dev), Location::host);
      EXPECT_LT(relative_rms(out->vis, want->vis), 1e-5);
    }
  }
  EXPECT_THROW(StageHarness(degrid_wproj::spec(), "cuda", degrid_wproj::decl,
                            degrid_wproj::Params{.variant = "gather", .kernel_lookup = "linear"}),
               ParamError);
}

// The window follows each baseline in time order: a block whose times go back is refused.
TEST_F(DegridGpuInput, MovingWindowNeedsTimeOrder) {
  auto ks = test::wproj_stack(160, 45, 4, 1.2, 500);
  std::mt19937_64 rng(test::seeds(1).front());
  auto v = tracks(*ks, 16, 4, rng);
  v->time[20] = v->time[19] - 1;
  StageHarness h(degrid_wproj::spec(), "cuda", degrid_wproj::decl, degrid_wproj::Params{.variant = "moving_window"});
  h.set_input("grid", moved(std::shared_ptr<const Grid>(test::random_grid(*ks, rng)), Location::device));
  h.set_input("kernels", moved(std::shared_ptr<const KernelStack>(ks), Location::device));
  EXPECT_THROW(h.process({{"vis", moved(std::shared_ptr<const VisBlock>(v), Location::device)}}), InputError);
}

// fft.image_to_grid: cuFFT over the whole grid equals FFTW over the image's columns and then rows.
TEST_F(DegridGpuInput, ImageToGridMatchesTheCpuBackend) {
  for (auto [image_size, padding] : {std::pair{160, 1.2}, std::pair{96, 1.25}}) {
    auto ks = test::wproj_stack(image_size, 45, 4, padding, 500);
    for (std::uint64_t seed : test::seeds(3)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", image " + std::to_string(image_size));
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<float> amp(-1, 1);
      auto img = std::make_shared<Image>();
      img->nx = img->ny = image_size;
      img->pixels = Array<float>::host(std::size_t(image_size) * image_size);
      for (float& p : img->pixels) p = amp(rng);
      auto run = [&](const std::string& backend, std::shared_ptr<const Image> i, std::shared_ptr<const KernelStack> k) {
        StageHarness h(fft_image_to_grid::spec(), backend);
        h.set_input("image", i);
        h.set_input("kernels", k);
        h.process();
        return h.output<Grid>("grid");
      };
      auto want = run("cpu", img, ks);
      auto got = moved(run("cuda", moved(std::shared_ptr<const Image>(img), Location::device),
                           moved(std::shared_ptr<const KernelStack>(ks), Location::device)),
                       Location::host);
      ASSERT_EQ(got->cells.size(), want->cells.size());
      EXPECT_EQ(got->geom, want->geom);
      EXPECT_EQ(got->totals[0], 0.0);
      EXPECT_LT(relative_rms(got->cells, want->cells), 1e-5);
    }
  }
}

}  // namespace
