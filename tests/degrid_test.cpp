// Degridding against independent references: the adjointness identity with the gridder
// (<degrid(G), V> = <G, grid(V)>, unit weights), the transform's adjointness with fft.grid_to_image,
// degrid.wproj against degrid.serial, and the whole prediction chain (model image ->
// image.grid_correct -> fft.image_to_grid -> degrid) against a direct DFT of point sources.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <random>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/degrid/serial.hpp"
#include "stages/degrid/wproj.hpp"
#include "stages/fft/grid_to_image.hpp"
#include "stages/fft/image_to_grid.hpp"
#include "stages/grid/serial.hpp"
#include "stages/image/grid_correct.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/degrid_cases.hpp"
#include "tests/support/dft.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/wproj_stack.hpp"

namespace uvflow {
namespace {

using cdouble = std::complex<double>;
using test::random_block;
using test::random_grid;

template <class A, class B>
cdouble dot(const A& a, const B& b) {  // sum conj(a) b, in double
  cdouble s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::conj(cdouble(a[i])) * cdouble(b[i]);
  return s;
}

class DegridAdjoint : public ::testing::TestWithParam<const char*> {};

// <degrid(G), V> = <G, grid(V)> for random G and V: the two are transposes of each other, kernel
// conjugation, w sign and the kernel lookup (nearest, or bilinear on both sides) included.
TEST_P(DegridAdjoint, DegridIsTheAdjointOfGridding) {
  const bool serial = std::string(GetParam()) == "serial";
  auto ks = test::wproj_stack(128, 60, 8, 1.2, 400);
  for (std::uint64_t seed : test::seeds(20261124)) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
    std::mt19937_64 rng(seed);
    auto v = random_block(*ks, 3000, rng);
    auto g = random_grid(*ks, rng);
    for (std::string lookup : {"nearest", "linear"}) {
      SCOPED_TRACE("kernel_lookup " + lookup);
      StageHarness d = serial ? StageHarness(degrid_serial::spec(), "cpu", degrid_serial::decl, {.kernel_lookup = lookup})
                              : StageHarness(degrid_wproj::spec(), "cpu", degrid_wproj::decl, {.kernel_lookup = lookup});
      d.set_input("grid", g);
      d.set_input("kernels", ks);
      d.process({{"vis", v}});
      StageHarness gr(grid_serial::spec(), "cpu", grid_serial::decl, {.kernel_lookup = lookup});
      gr.set_input("kernels", ks);
      gr.process({{"vis", v}});
      gr.finish();
      const cdouble lhs = dot(d.output<VisBlock>("vis")->vis, v->vis);
      const cdouble rhs = dot(g->cells, gr.output<Grid>("grid")->cells);
      EXPECT_LT(std::abs(lhs - rhs), 1e-5 * std::abs(rhs)) << lhs << " vs " << rhs;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DegridAdjoint, ::testing::Values("serial", "wproj"));

// degrid.wproj (rows layout, float, parallel) agrees with the serial reference, on raw blocks and
// on blocks placed and w-sorted by uvw.w_sort (whose order it keeps).
TEST(DegridWproj, MatchesTheSerialReferenceRawAndPlaced) {
  auto ks = test::wproj_stack(128, 60, 4, 1.2, 400);
  for (std::uint64_t seed : test::seeds(7)) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
    std::mt19937_64 rng(seed);
    auto v = random_block(*ks, 5000, rng);
    auto g = random_grid(*ks, rng);
    StageHarness sort(uvw_w_sort::spec(), "cpu");
    sort.set_input("kernels", ks);
    sort.process({{"vis", v}});
    auto placed = sort.output<VisBlock>("vis");
    for (auto block : {std::shared_ptr<const VisBlock>(v), placed}) {
      for (std::string lookup : {"nearest", "linear"}) {
        SCOPED_TRACE("kernel_lookup " + lookup);
        StageHarness hs(degrid_serial::spec(), "cpu", degrid_serial::decl, degrid_serial::Params{.kernel_lookup = lookup});
        StageHarness hw(degrid_wproj::spec(), "cpu", degrid_wproj::decl, degrid_wproj::Params{.kernel_lookup = lookup});
        for (StageHarness* h : {&hs, &hw}) {
          h->set_input("grid", g);
          h->set_input("kernels", ks);
          h->process({{"vis", block}});
        }
        auto ref = hs.output<VisBlock>("vis"), fast = hw.output<VisBlock>("vis");
        ASSERT_EQ(fast->size(), block->size());
        double err = 0, norm = 0;
        for (std::size_t i = 0; i < block->size(); ++i) {
          err += std::norm(cdouble(fast->vis[i]) - cdouble(ref->vis[i]));
          norm += std::norm(cdouble(ref->vis[i]));
          EXPECT_EQ(fast->uu[i], block->uu[i]);  // same order, other arrays kept
        }
        EXPECT_LT(std::sqrt(err / norm), 1e-5);
      }
    }
  }
}

// Re <image_to_grid(I), G> = <I, grid_to_image(G)> * norm: the transform is the adjoint of the
// imaging transform (grid_to_image divides by the norm and keeps the real part).
// Padding 1 too: the image fills the grid, and its columns wrap around the grid's whole width (90
// cells: half the grid is no whole number of the transform's 16-column chunks, so one of them
// reaches from the last pixel column round to the first).
TEST(ImageToGrid, IsTheAdjointOfGridToImage) {
  for (const double padding : {1.25, 1.0}) {
    auto ks = test::wproj_stack(90, 60, 4, padding, 200);
    ASSERT_EQ(ks->geom.image_size, 90);
    if (padding == 1.0) {
      ASSERT_EQ(ks->geom.grid_size, 90) << "the image fills the grid";
    }
    for (std::uint64_t seed : test::seeds(11)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it), grid " +
                   std::to_string(ks->geom.grid_size) + " for an image of 90");
      std::mt19937_64 rng(seed);
      auto g = random_grid(*ks, rng);
      g->totals[0] = 3.5;  // the norm grid_to_image divides by
      g->obs = std::make_shared<Observation>();
      auto img = test::random_image(ks->geom.image_size, rng);

      StageHarness fwd(fft_grid_to_image::spec(), "cpu");
      fwd.process({{"grid", g}});
      auto dirty = fwd.output<Image>("image");
      StageHarness adj(fft_image_to_grid::spec(), "cpu");
      adj.set_input("image", img);
      adj.set_input("kernels", ks);
      adj.process();
      auto model = adj.output<Grid>("grid");

      double lhs = dot(model->cells, g->cells).real(), rhs = 0, img2 = 0, dirty2 = 0;
      for (std::size_t i = 0; i < img->pixels.size(); ++i) {
        rhs += double(img->pixels[i]) * dirty->pixels[i];
        img2 += double(img->pixels[i]) * img->pixels[i];
        dirty2 += double(dirty->pixels[i]) * dirty->pixels[i];
      }
      rhs *= 3.5;
      // Random signs make the inner product cancel, so float rounding is measured against the
      // Cauchy-Schwarz bound |I| |grid_to_image(G)| norm, not against the (possibly small) result.
      const double scale = std::sqrt(img2 * dirty2) * 3.5;
      EXPECT_LT(std::abs(lhs - rhs), 1e-5 * scale) << lhs << " vs " << rhs << " (scale " << scale << ")";
    }
  }
}

// The grid from its definition, in double: G[v][u] = sum_{x,y} I(x, y) exp(+2 pi i ((u - N/2)(X - N/2) +
// (v - N/2)(Y - N/2)) / N), X = x + (N - n)/2 (the transpose of grid_to_image's DFT, without the real
// part and the norm). Images that fill their grid (50 and 36 cells: half the grid no whole number of
// the transform's 16-column chunks) and one padded; fixed and fresh random pixels.
TEST(ImageToGrid, MatchesTheDirectTransformOfTheImage) {
  for (const auto& [image, padding] : {std::pair{50, 1.0}, {36, 1.0}, {40, 1.25}}) {
    auto ks = test::wproj_stack(image, 60, 4, padding, 200);
    const int N = ks->geom.grid_size, n = image, off = (N - n) / 2, c = N / 2;
    if (padding == 1.0) {
      ASSERT_EQ(N, n) << "the image fills the grid";
    }
    const test::Twiddles tw(N, +1);
    for (std::uint64_t seed : test::seeds(50)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it), grid " + std::to_string(N) +
                   " for an image of " + std::to_string(n));
      std::mt19937_64 rng(seed);
      auto img = test::random_image(n, rng);
      StageHarness h(fft_image_to_grid::spec(), "cpu");
      h.set_input("image", img);
      h.set_input("kernels", ks);
      h.process();
      auto g = h.output<Grid>("grid");
      double err2 = 0, ref2 = 0;
      for (int v = 0; v < N; ++v)
        for (int u = 0; u < N; ++u) {
          cdouble ref = 0;
          for (int y = 0; y < n; ++y)
            for (int x = 0; x < n; ++x) {
              const long phase = long(u - c) * (x + off - c) + long(v - c) * (y + off - c);
              ref += double(img->pixels[std::size_t(y) * n + x]) * tw(phase);
            }
          err2 += std::norm(cdouble(g->cells[std::size_t(v) * N + u]) - ref);
          ref2 += std::norm(ref);
        }
      EXPECT_LT(std::sqrt(err2 / ref2), 1e-5);
    }
  }
}

TEST(ImageToGrid, RefusesAModelThatDoesNotMatchTheKernels) {
  auto ks = test::wproj_stack(96, 60, 4, 1.25, 200);
  auto img = std::make_shared<Image>();
  img->nx = img->ny = 64;
  img->pixels = Array<float>::host(64 * 64);
  StageHarness h(fft_image_to_grid::spec(), "cpu");
  h.set_input("image", img);
  h.set_input("kernels", ks);
  EXPECT_THROW(h.process(), InputError);
  img->nx = img->ny = 96;
  img->pixels = Array<float>::host(96 * 96);
  img->wcs = SkyWcs{.cell_rad = ks->geom.cell_rad * 1.5};
  EXPECT_THROW(h.process(), InputError);
}

// The prediction chain against a direct DFT of point sources on pixel centres (w-term included,
// V = S exp(+2 pi i (u l + v m + w (n - 1))), l = (N/2 - x) cell, m = (y - N/2) cell as the
// imaging tests use), sources within the inner 80 % of a 2.1-degree field, |w| up to 600
// wavelengths. Returns the relative RMS error of the predicted visibilities.
struct PredictSettings {
  int oversample = 16;
  int w_planes = 256;
  double padding = 2.0;
  std::string kernel_lookup = "linear";
  std::string degridder = "wproj";  // or "serial"
};

double predict_vs_dft(const PredictSettings& p, std::uint64_t seed) {
  const int n = 128;
  const double cell_arcsec = 60;
  StageHarness kh(kernels_wproj::spec(), "cpu",
                  {{"image_size", std::int64_t(n)},
                   {"cell_arcsec", cell_arcsec},
                   {"oversample", std::int64_t(p.oversample)},
                   {"w_planes", std::int64_t(p.w_planes)},
                   {"padding", p.padding},
                   {"max_conv_size", std::int64_t(4096)},
                   {"cache_dir", std::string()}});
  kh.set_input("info", test::w_stats_info(600, 0, 300));
  kh.process();
  auto ks = kh.output<KernelStack>("kernels");
  std::mt19937_64 rng(seed);
  auto v = random_block(*ks, 4000, rng);
  auto img = std::make_shared<Image>();
  img->nx = img->ny = n;
  img->pixels = Array<float>::host(std::size_t(n) * n);
  std::fill(img->pixels.begin(), img->pixels.end(), 0.0f);
  std::uniform_int_distribution<int> pix(int(0.1 * n), int(0.9 * n) - 1);
  std::uniform_real_distribution<double> flux(0.1, 2);
  struct Src { int x, y; double s; };
  std::vector<Src> sky;
  for (int k = 0; k < 8; ++k) {
    sky.push_back({pix(rng), pix(rng), flux(rng)});
    img->pixels[std::size_t(sky.back().y) * n + sky.back().x] += float(sky.back().s);
  }

  StageHarness corr(image_grid_correct::spec(), "cpu");
  corr.set_input("image", img);
  corr.set_input("kernels", ks);
  corr.process();
  StageHarness fft(fft_image_to_grid::spec(), "cpu");
  fft.set_input("image", corr.output<Image>("image"));
  fft.set_input("kernels", ks);
  fft.process();
  const auto model = fft.output<Grid>("grid");
  std::shared_ptr<const VisBlock> pred;
  if (p.degridder == "serial") {
    StageHarness h(degrid_serial::spec(), "cpu", degrid_serial::decl,
                   degrid_serial::Params{.kernel_lookup = p.kernel_lookup});
    h.set_input("grid", model);
    h.set_input("kernels", ks);
    h.process({{"vis", v}});
    pred = h.output<VisBlock>("vis");
  } else {
    StageHarness h(degrid_wproj::spec(), "cpu", degrid_wproj::decl,
                   degrid_wproj::Params{.kernel_lookup = p.kernel_lookup});
    h.set_input("grid", model);
    h.set_input("kernels", ks);
    h.process({{"vis", v}});
    pred = h.output<VisBlock>("vis");
  }

  const double cell = cell_arcsec / 3600 * M_PI / 180;
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < v->size(); ++i) {
    cdouble dft = 0;
    for (const Src& s : sky) {
      const double l = (n / 2 - s.x) * cell, m = (s.y - n / 2) * cell, nn = std::sqrt(1 - l * l - m * m);
      dft += s.s * std::exp(cdouble(0, 2 * M_PI * (v->uu[i] * l + v->vv[i] * m + v->ww[i] * (nn - 1))));
    }
    err += std::norm(cdouble(pred->vis[i]) - dft);
    norm += std::norm(dft);
  }
  return std::sqrt(err / norm);
}

// The settings pipelines/predict*.yaml ship (oversample 16, bilinear lookup, padding 2, w-planes
// well above the automatic count: 256 here, against 16) predict within the 2e-3 on both cpu
// degridders.
TEST(DegridPrediction, ShippedSettingsMatchADirectDftWithin2e3) {
  for (std::uint64_t seed : test::seeds(3)) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
    for (const char* d : {"wproj", "serial"}) {
      const double e = predict_vs_dft({.degridder = d}, seed);
      RecordProperty(std::string("relative_rms_") + d, std::to_string(e));
      EXPECT_LT(e, 2e-3) << d;
    }
  }
}

// What limits it, each measurably: the nearest-sample lookup's error falls as 1/oversample (it
// moves a visibility by up to 1/(2o) cell); the bilinear lookup removes most of it; fewer w-planes
// and less padding raise the floor. bench/results/degrid_accuracy.md has the table.
TEST(DegridPrediction, ErrorFallsWithOversamplingPlanesAndPadding) {
  const std::uint64_t seed = 3;
  const double n4 = predict_vs_dft({.oversample = 4, .kernel_lookup = "nearest"}, seed),
               n16 = predict_vs_dft({.oversample = 16, .kernel_lookup = "nearest"}, seed);
  EXPECT_GT(n4 / n16, 3.5);
  EXPECT_LT(n4 / n16, 4.5);
  const double shipped = predict_vs_dft({}, seed);
  EXPECT_LT(shipped * 5, n16);
  EXPECT_GT(predict_vs_dft({.w_planes = 32}, seed), 3 * shipped);
  EXPECT_GT(predict_vs_dft({.padding = 1.2}, seed), 2 * shipped);
  if (std::getenv("UVFLOW_DEGRID_ACCURACY_TABLE")) {  // bench/results/degrid_accuracy.md
    for (double pad : {1.2, 1.5, 2.0})
      for (int planes : {32, 128, 256})
        for (const char* lookup : {"nearest", "linear"}) {
          std::printf("| %.1f | %d | %s |", pad, planes, lookup);
          for (int o : {4, 8, 16})
            std::printf(" %.3g |", predict_vs_dft({.oversample = o, .w_planes = planes, .padding = pad,
                                                   .kernel_lookup = lookup}, seed));
          std::printf("\n");
        }
  }
}

}  // namespace
}  // namespace uvflow
