// fft.grid_to_image and image.grid_correct against independent references: a direct
// double-precision DFT of the grid (no FFT, no (-1)^(x+y) trick), the fringe of a single cell,
// a point source placed with DESIGN.md's gridding conventions, and the correction formula evaluated
// in long double from Schwab's coefficients.
#include "stages/fft/grid_to_image.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <random>
#include <string>
#include <vector>

#include "runtime/harness.hpp"
#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/payloads/kernels.hpp"
#include "stages/image/grid_correct.hpp"
#include "stages/shared/spheroidal.hpp"
#include "tests/support/dft.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/spheroidal_ref.hpp"
#include "tests/support/wproj_stack.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

constexpr double kPi = 3.14159265358979323846;

std::shared_ptr<Observation> observation() {
  auto obs = std::make_shared<Observation>();
  obs->telescope = "SKA1-Low";
  obs->ra_rad = 1.25, obs->dec_rad = -0.45;
  obs->ref_freq_hz = 1.0e8;
  obs->date_obs = "2024-01-02T03:04:05";
  return obs;
}

std::shared_ptr<Grid> empty_grid(int grid_size, int image_size, double cell_rad = 1e-5) {
  return std::make_shared<Grid>(Grid::zeros_on_host(GridGeometry{image_size, grid_size, cell_rad}, observation()));
}

std::shared_ptr<Grid> random_grid(int grid_size, int image_size, unsigned seed, int v_from = 0, int v_to = -1) {
  auto g = empty_grid(grid_size, image_size);
  std::mt19937 rng(seed);
  std::normal_distribution<float> z;
  if (v_to < 0) v_to = grid_size;
  for (int v = v_from; v < v_to; ++v)
    for (int u = 0; u < grid_size; ++u) g->cells[std::size_t(v) * grid_size + u] = cfloat(z(rng), z(rng));
  g->totals[0] = std::uniform_real_distribution<double>(0.5, 50)(rng);
  return g;
}

std::shared_ptr<const Image> to_image(const std::shared_ptr<const Grid>& grid) {
  const StageSpec spec = fft_grid_to_image::spec();
  StageHarness h(spec, "cpu");
  h.set_input("grid", grid);
  h.process();
  return h.output<Image>("image");
}

// I(x, y) = Re sum_{u,v} G[v][u] exp(-2 pi i ((u - N/2)(X - N/2) + (v - N/2)(Y - N/2)) / N) / norm,
// X = x + (N - n)/2: the centred DFT the shifted FFT stands for, straight from its definition.
std::vector<double> dft_image(const Grid& g) {
  const int N = g.geom.grid_size, n = g.geom.image_size, off = (N - n) / 2, c = N / 2;
  const test::Twiddles tw(N, -1);
  std::vector<double> img(std::size_t(n) * n);
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      std::complex<double> sum = 0;
      for (int v = 0; v < N; ++v)
        for (int u = 0; u < N; ++u) {
          const std::complex<double> cell(g.cells[std::size_t(v) * N + u]);
          if (cell != 0.0) sum += cell * tw(long(u - c) * (x + off - c) + long(v - c) * (y + off - c));
        }
      img[std::size_t(y) * n + x] = sum.real() / g.norm();
    }
  return img;
}

// Relative Frobenius error of the image against the reference, and the worst pixel error.
void expect_close(const Image& img, const std::vector<double>& ref, double tol = 1e-5) {
  ASSERT_EQ(img.pixels.size(), ref.size());
  double err2 = 0, ref2 = 0, worst = 0, peak = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = img.pixels[i] - ref[i];
    err2 += d * d;
    ref2 += ref[i] * ref[i];
    worst = std::max(worst, std::abs(d));
    peak = std::max(peak, std::abs(ref[i]));
  }
  EXPECT_LT(std::sqrt(err2 / ref2), tol) << "relative Frobenius error";
  EXPECT_LT(worst, 10 * tol * peak) << "worst pixel";
}

// ---------------------------------------------------------------- fft.grid_to_image

TEST(GridToImage, MatchesDirectDftOfAFixedGrid) {
  auto g = random_grid(40, 32, 12345);
  const std::vector<cfloat> before(g->cells.begin(), g->cells.end());
  auto img = to_image(g);
  EXPECT_EQ(img->nx, 32);
  EXPECT_EQ(img->ny, 32);
  expect_close(*img, dft_image(*g));
  EXPECT_TRUE(std::equal(before.begin(), before.end(), g->cells.begin())) << "the input grid is left as it was";
}

TEST(GridToImage, MatchesDirectDftOfRandomGrids) {
  for (std::uint64_t seed : seeds(981160246)) {  // the fixed seed drew a 44^2 image filling its grid
    SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
    std::mt19937 rng(static_cast<unsigned>(seed));
    for (int trial = 0; trial < 3; ++trial) {
      const int N = 2 * std::uniform_int_distribution<int>(8, 30)(rng);
      const int n = 2 * std::uniform_int_distribution<int>(1, N / 2)(rng);
      SCOPED_TRACE("grid " + std::to_string(N) + ", image " + std::to_string(n));
      auto g = random_grid(N, n, rng());
      expect_close(*to_image(g), dft_image(*g));
    }
  }
}

// No padding: the image fills the grid, so the columns it takes wrap around the grid's whole width
// (one chunk of them crossed a pixel row before fftw::wrapped cut the axis at the image's first).
TEST(GridToImage, MatchesDirectDftWhenTheImageFillsTheGrid) {
  for (const int N : {2, 16, 34, 40, 44, 64}) {
    SCOPED_TRACE("grid and image " + std::to_string(N));
    auto g = random_grid(N, N, unsigned(N));
    expect_close(*to_image(g), dft_image(*g));
  }
}

TEST(GridToImage, MatchesDirectDftWhenOnlyABandOfRowsHoldsData) {
  // Like a real grid: the rows outside the gridded band are zero and are skipped by the FFT.
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int from = std::uniform_int_distribution<int>(0, 47)(rng);
  const int to = std::uniform_int_distribution<int>(from + 1, 48)(rng);
  SCOPED_TRACE("rows " + std::to_string(from) + " to " + std::to_string(to));
  auto g = random_grid(48, 40, rng(), from, to);
  expect_close(*to_image(g), dft_image(*g));
}

TEST(GridToImage, SingleCellGivesItsFringe) {
  const int N = 64, n = 48, off = (N - n) / 2;
  for (auto [du, dv] : {std::pair{0, 0}, {3, 0}, {0, -5}, {7, 2}, {-4, 9}}) {
    SCOPED_TRACE("cell offset " + std::to_string(du) + ", " + std::to_string(dv));
    auto g = empty_grid(N, n);
    g->cells[std::size_t(N / 2 + dv) * N + N / 2 + du] = cfloat(2.0f, 0.0f);
    g->totals[0] = 2.0;
    auto img = to_image(g);
    double worst = 0;
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        const double want = std::cos(2 * kPi * (du * (x + off - N / 2) + dv * (y + off - N / 2)) / N);
        worst = std::max(worst, std::abs(img->pixels[std::size_t(y) * n + x] - want));
      }
    EXPECT_LT(worst, 1e-5);
  }
}

TEST(GridToImage, PointSourceLandsWhereRaIncreasesToTheLeft) {
  // Visibilities V = exp(+2 pi i (u l + v m)) of a source at (l, m) = (3, -5) cells, gridded with
  // DESIGN.md's conventions (pos_u = -uu*scale, pos_v = vv*scale, one cell each): the image peaks at
  // x = n/2 - l/cell, y = n/2 + m/cell.
  const int N = 64, n = 48;
  const double cell = 1e-4, scale = N * cell;
  const double l = 3 * cell, m = -5 * cell;
  auto g = empty_grid(N, n, cell);
  int count = 0;
  for (int cv = -10; cv <= 10; ++cv)
    for (int cu = -10; cu <= 10; ++cu) {
      if (cu * cu + cv * cv > 100) continue;
      const double uu = -cu / scale, vv = cv / scale;
      const std::complex<double> vis = std::polar(1.0, 2 * kPi * (uu * l + vv * m));
      const int gu = int(std::lround(-uu * scale)) + N / 2, gv = int(std::lround(vv * scale)) + N / 2;
      g->cells[std::size_t(gv) * N + gu] += cfloat(vis);
      ++count;
    }
  g->totals[0] = count;
  auto img = to_image(g);
  const auto peak = std::max_element(img->pixels.begin(), img->pixels.end()) - img->pixels.begin();
  EXPECT_EQ(peak % n, n / 2 - 3) << "x = n/2 - l/cell";
  EXPECT_EQ(peak / n, n / 2 - 5) << "y = n/2 + m/cell";
  EXPECT_NEAR(img->pixels[peak], 1.0, 1e-5) << "a 1 Jy source peaks at 1 after the norm";
}

TEST(GridToImage, DividesByTheNorm) {
  auto g = random_grid(32, 24, 777);
  auto scaled = empty_grid(32, 24);
  for (std::size_t i = 0; i < g->cells.size(); ++i) scaled->cells[i] = g->cells[i] * 8.0f;
  scaled->totals[0] = g->norm() * 8;
  auto a = to_image(g), b = to_image(scaled);
  for (std::size_t i = 0; i < a->pixels.size(); ++i)
    EXPECT_NEAR(a->pixels[i], b->pixels[i], 1e-5 * (1 + std::abs(a->pixels[i])));
  auto none = empty_grid(32, 24);
  EXPECT_THROW(to_image(none), std::runtime_error) << "norm 0: nothing was gridded";
}

TEST(GridToImage, CropsTheCentreAndCarriesTheSkyCoordinates) {
  // A cell at the grid centre's row shows which grid columns the image keeps: the fringe of
  // cell (du, 0) at pixel x is cos(2 pi du (x + (N - n)/2 - N/2) / N).
  const int N = 60, n = 20;
  auto g = empty_grid(N, n, 2.5e-5);
  g->cells[std::size_t(N / 2) * N + N / 2 + 1] = cfloat(1, 0);
  g->totals[0] = 1;
  auto img = to_image(g);
  for (int x = 0; x < n; ++x) EXPECT_NEAR(img->pixels[x], std::cos(2 * kPi * (x + (N - n) / 2 - N / 2) / N), 1e-5);
  ASSERT_TRUE(img->wcs.has_value());
  EXPECT_EQ(img->wcs->ra_rad, 1.25);
  EXPECT_EQ(img->wcs->dec_rad, -0.45);
  EXPECT_EQ(img->wcs->cell_rad, 2.5e-5);
  EXPECT_EQ(img->wcs->freq_hz, 1.0e8);
  EXPECT_EQ(img->wcs->telescope, "SKA1-Low");
  EXPECT_EQ(img->wcs->date_obs, "2024-01-02T03:04:05");
  EXPECT_EQ(img->wcs->bunit, "JY/BEAM");
}

// ---------------------------------------------------------------- image.grid_correct

std::shared_ptr<KernelStack> stack_for(int grid_size, int image_size, int oversample) {
  auto ks = std::make_shared<KernelStack>();
  ks->geom = GridGeometry{image_size, grid_size, 1e-5};
  ks->oversample = oversample;
  return ks;
}

std::shared_ptr<Image> random_image(int n, unsigned seed) {
  auto img = std::make_shared<Image>();
  img->nx = img->ny = n;
  img->index = 3;
  img->pixels = Array<float>::host(std::size_t(n) * n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> z;
  for (auto& p : img->pixels) p = z(rng);
  img->wcs = SkyWcs{};
  img->wcs->cell_rad = 1e-5;
  return img;
}

void expect_corrected(int N, int n, int o, unsigned seed, int sinc_power = 1) {
  SCOPED_TRACE("grid " + std::to_string(N) + ", image " + std::to_string(n) + ", oversample " + std::to_string(o));
  auto img = random_image(n, seed);
  const StageSpec spec = image_grid_correct::spec();
  StageHarness h(spec, "cpu", {{"table_correction", std::string(sinc_power == 2 ? "sinc2" : "sinc")}});
  h.set_input("image", img);
  h.set_input("kernels", stack_for(N, n, o));
  h.process();
  auto out = h.output<Image>("image");
  ASSERT_EQ(out->pixels.size(), img->pixels.size());
  EXPECT_EQ(out->index, 3);
  EXPECT_TRUE(out->wcs.has_value());
  const int off = (N - n) / 2;
  std::vector<long double> corr(n);
  for (int i = 0; i < n; ++i) corr[i] = grid_correction_ref(i + off, N, o, sinc_power);
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      const long double want = img->pixels[std::size_t(y) * n + x] * corr[x] * corr[y];
      ASSERT_NEAR(out->pixels[std::size_t(y) * n + x], double(want), 1e-6 * std::abs(double(want)) + 1e-30)
          << x << ", " << y;
    }
}

TEST(GridCorrect, MatchesTheFormula) {
  expect_corrected(48, 40, 4, 99);
  expect_corrected(640, 512, 4, 7);
  expect_corrected(640, 512, 4, 7, 2);  // OSKAR's sinc^2
}

TEST(GridCorrect, MatchesTheFormulaOnRandomGeometry) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 5; ++trial) {
    const int N = 2 * std::uniform_int_distribution<int>(4, 200)(rng);
    const int n = 2 * std::uniform_int_distribution<int>(1, N / 2)(rng);
    const int o = 2 * std::uniform_int_distribution<int>(1, 8)(rng);
    expect_corrected(N, n, o, rng());
  }
}

// table_correction kernel, the default: the response in / out that the stage divided pixel (x, y)
// by, against table_response_ref, the response of the 2-D plane-0 table from its definition, at the
// corners, the centre and random pixels of real stacks. The stage sums plane 0's row 0 per axis (the
// table is separable); the reference sums the whole 2-D table, whose float values are separable to
// about 1e-7 of the peak, so the two agree to 1e-5 of the centre's response rather than relatively:
// at the corners of an image nearly as large as its grid the response is 1e-3.
void expect_kernel_corrected(const std::shared_ptr<const KernelStack>& ks, unsigned seed) {
  const int n = ks->geom.image_size, N = ks->geom.grid_size, o = ks->oversample, s = ks->support[0];
  SCOPED_TRACE("grid " + std::to_string(N) + ", image " + std::to_string(n) + ", oversample " + std::to_string(o) +
               ", support " + std::to_string(s) + ", grid corner at l^2 + m^2 = " +
               std::to_string(2 * std::pow(std::sin(ks->geom.cell_rad) * N / 2, 2)));
  auto img = random_image(n, seed);
  StageHarness h(image_grid_correct::spec(), "cpu");
  h.set_input("image", img);
  h.set_input("kernels", ks);
  h.process();
  auto out = h.output<Image>("image");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> any(0, n - 1);
  std::vector<std::pair<int, int>> pixels = {{0, 0}, {n - 1, 0}, {0, n - 1}, {n - 1, n - 1}, {n / 2, n / 2}};
  for (int i = 0; i < 40; ++i) pixels.push_back({any(rng), any(rng)});
  const int off = (N - n) / 2;
  int checked = 0;
  for (auto [x, y] : pixels) {
    const long double r = table_response_ref(ks->quarter.data(), ks->half_size(0), s, o, N, x + off, y + off);
    if (r < 1e-3) continue;  // no usable response (a correction above 1000): the stage leaves <= 0 alone
    const std::size_t i = std::size_t(y) * n + x;
    EXPECT_NEAR(img->pixels[i] / out->pixels[i], double(r), 1e-5) << x << ", " << y;
    ++checked;
  }
  EXPECT_GE(checked, 20);  // most: only pixels near the edge of an image nearly as large as its grid drop out
}

TEST(GridCorrect, KernelTableMatchesItsDefinition) {
  expect_kernel_corrected(wproj_stack(40, 600, 4), 3);
  expect_kernel_corrected(wproj_stack(256, 100, 16), 5);  // pipelines/ms_dirty_image.yaml's test case
  expect_kernel_corrected(wproj_stack(512, 20, 4, 1.5, 50), 9);
}

TEST(GridCorrect, KernelTableMatchesItsDefinitionOnRandomGeometry) {
  const auto seed = fresh_seed();  // UVFLOW_TEST_SEED replays the one a failure printed
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 4; ++trial) {
    const int n = 2 * std::uniform_int_distribution<int>(16, 200)(rng);
    const int o = 2 * std::uniform_int_distribution<int>(1, 8)(rng);
    const double padding = std::uniform_real_distribution<double>(1.1, 2.0)(rng);
    // Room in the kernel FFT (padding x n samples) for supports of at least 2 at this oversampling.
    if (padding * n < 10 * o + 8) {
      --trial;
      continue;
    }
    // Fields whose grid stays above the horizon (corner l^2 + m^2 < 0.9), where plane 0 is separable.
    // kernels.wproj takes cells of up to 3600 arcsec (small grids allowed more: 3657 failed in CI).
    const double max_cell =
        std::min(3600.0, std::asin(2 * std::sqrt(0.45) / wproj_grid_size(n, padding)) * 180 / M_PI * 3600);
    const double cell = std::uniform_real_distribution<double>(10, max_cell)(rng);
    expect_kernel_corrected(wproj_stack(n, cell, o, padding), rng());
  }
}

// The kernel response differs from grdsf where the table samples the taper coarsely: at oversample
// 16 on pipelines/ms_dirty_image.yaml's 320-cell test grid, the table holds 18 screen samples, and
// 110 pixels out the two differ by 0.24 % (the shift of a point source's peak against WSClean
// that table_correction kernel removes).
TEST(GridCorrect, KernelTableDiffersFromGrdsfWhereTheTableIsCoarse) {
  auto ks = wproj_stack(256, 100, 16);
  const int N = ks->geom.grid_size;
  ASSERT_EQ(ks->conv_size / ks->oversample, 18);
  const auto* row0 = reinterpret_cast<const float*>(ks->quarter.data());
  auto ratio = [&](int pixel) {  // grdsf sinc / response
    const int i = N / 2 + pixel;
    return 1 / (kernel_table_response(i, N, 16, ks->half_size(0), row0) * grid_correction(i, N, 16, 1));
  };
  EXPECT_NEAR(ratio(0), 1.0, 1e-6);  // grdsf(0) is 1 to 3e-7
  EXPECT_NEAR(ratio(110), 0.99764, 2e-4);  // grdsf's correction is 0.24 % off there
  std::printf("grdsf sinc / kernel table response at 40, 80, 110 pixels: %.5f %.5f %.5f\n", ratio(40), ratio(80),
              ratio(110));
}

TEST(GridCorrect, KernelTableNeedsPlaneZero) {
  StageHarness h(image_grid_correct::spec(), "cpu");
  h.set_input("image", random_image(40, 1));
  h.set_input("kernels", stack_for(48, 40, 4));  // geometry only
  try {
    h.process();
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("table_correction kernel reads plane 0"), std::string::npos) << e.what();
  }
}

TEST(GridCorrect, CorrectionIsSymmetricAndOneOverGrdsfAtTheCentre) {
  for (int N : {48, 640, 18000})
    for (int o : {2, 4, 16}) {
      EXPECT_NEAR(grid_correction(N / 2, N, o), 1.0 / grdsf(0.0), 1e-15);
      for (int d = 1; d < N / 2; d += std::max(1, N / 97)) {
        EXPECT_EQ(grid_correction(N / 2 + d, N, o), grid_correction(N / 2 - d, N, o)) << N << " " << o << " " << d;
        EXPECT_NEAR(grid_correction(N / 2 + d, N, o), double(grid_correction_ref(N / 2 + d, N, o)),
                    1e-12 * double(grid_correction_ref(N / 2 + d, N, o)));
        EXPECT_GT(grid_correction(N / 2 + d, N, o), grid_correction(N / 2 + d - 1, N, o)) << "grows towards the edge";
      }
    }
}

TEST(GridCorrect, RejectsAnImageOfAnotherSize) {
  const StageSpec spec = image_grid_correct::spec();
  StageHarness h(spec, "cpu");
  h.set_input("image", random_image(32, 1));
  h.set_input("kernels", stack_for(48, 40, 4));
  EXPECT_THROW(h.process(), std::runtime_error);
}

}  // namespace
