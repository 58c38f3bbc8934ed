#include "tests/support/edge_wrap.hpp"

#include <gtest/gtest.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "stages/image/psf.hpp"
#include "stages/io/simulate_frames.hpp"

namespace uvflow::test {

std::vector<double> edge_wrap(Plane in, Plane psf) {
  const int inY = in.ny, inX = in.nx, kY = psf.ny, kX = psf.nx;
  std::vector<double> out(static_cast<size_t>(inX) * inY);
  // Listing 4.1 in double: every sum[i][j] takes its terms in the listing's (k, l) order. Only the bookkeeping moves: output row i is
  // accumulated for all j at once, and the wrapped input row (i + k) mod inY is laid out once,
  // extended by kX - 1 wrapped columns, so the innermost loop needs no modulo. Rows in parallel.
  tbb::parallel_for(0, inY, [&](int i) {
    std::vector<double> sum(inX, 0.0), row(static_cast<size_t>(inX) + kX - 1);
    for (int k = 0; k < kY; k++) {
      for (size_t c = 0; c < row.size(); c++) row[c] = in.at(int(c % inX), (i + k) % inY);
      for (int l = 0; l < kX; l++) {
        const double p = psf.at(l, k);
        const double* r = row.data() + l;
        for (int j = 0; j < inX; j++) sum[j] += r[j] * p;
      }
    }
    for (int j = 0; j < inX; j++) out[static_cast<size_t>((i + kY / 2) % inY) * inX + (j + kX / 2) % inX] = sum[j];
  });
  return out;
}

double relative_frobenius(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return a.size() == b.size() ? std::sqrt(num / den) : INFINITY;
}

Plane plane(const Image& im) { return {im.nx, im.ny, im.pixels.data()}; }

std::vector<double> as_double(const Image& im) { return {im.pixels.begin(), im.pixels.end()}; }

std::shared_ptr<Image> blank(int nx, int ny) {
  auto im = std::make_shared<Image>();
  im->nx = nx;
  im->ny = ny;
  im->pixels = Array<float>::host(std::size_t(nx) * ny);
  std::fill(im->pixels.begin(), im->pixels.end(), 0.0f);
  return im;
}

std::shared_ptr<Image> uniform(int nx, int ny, std::mt19937& rng, float lo, float hi) {
  auto im = blank(nx, ny);
  std::uniform_real_distribution<float> u(lo, hi);
  for (auto& p : im->pixels) p = u(rng);
  return im;
}

ImagePtr simulated(int nx, int ny, int count, int index, int seed) {
  StageHarness h(io_simulate_frames::spec(), "cpu",
                 {{"width", std::int64_t(nx)}, {"height", std::int64_t(ny)}, {"count", std::int64_t(count)},
                  {"seed", std::int64_t(seed)}});
  h.run_source();
  return h.output<Image>("frames", index);
}

ImagePtr model_psf(int kx, int ky) {
  StageHarness h(image_psf::spec(), "cpu", {{"size_x", std::int64_t(kx)}, {"size_y", std::int64_t(ky)}});
  h.run_source();
  return h.output<Image>("psf");
}

std::vector<std::pair<ImagePtr, std::string>> bad_psfs() {
  auto nan = blank(5, 5);
  nan->pixels[2 * 5 + 3] = NAN;
  auto inf = blank(5, 5);
  inf->pixels[4] = INFINITY;
  return {{nan, "input 'psf': PSF pixel (x 3, y 2) is NaN"},
          {inf, "input 'psf': PSF pixel (x 4, y 0) is infinite"},
          {blank(5, 5), "input 'psf': PSF is all zero"}};
}

std::string psf_larger_than_13x17(int kx, int ky) {
  return "the PSF (" + std::to_string(kx) + " x " + std::to_string(ky) +
         " pixels, width x height) is larger than frame 0 (13 x 17)";
}

void expect_input_error(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected one saying '" << text << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
  }
}

void PrintTo(const ConvolveCase& c, std::ostream* os) {
  *os << "frame " << c.ny << " x " << c.nx << ", PSF " << c.ky << " x " << c.kx << " (rows x columns)";
}

std::vector<ConvolveCase> convolve_cases() {
  std::vector<ConvolveCase> v;
  for (auto [ny, nx] : {std::pair{5271, 813}, std::pair{813, 5271}})
    for (int k : {1, 2, 15, 31, 64, 255}) v.push_back({ny, nx, k, k});
  for (auto [ky, kx] : {std::pair{1, 1}, {2, 2}, {2, 5}, {9, 7}, {13, 11}, {16, 12}, {17, 13}})
    v.push_back({17, 13, ky, kx});
  return v;
}

std::string case_name(const ConvolveCase& c, bool random) {
  return "frame" + std::to_string(c.ny) + "x" + std::to_string(c.nx) + "_psf" + std::to_string(c.ky) + "x" +
         std::to_string(c.kx) + (random ? "_random" : "_fixed");
}

std::pair<ImagePtr, ImagePtr> case_inputs(const ConvolveCase& c, bool random, std::mt19937& rng) {
  if (!random) return {simulated(c.nx, c.ny), model_psf(c.kx, c.ky)};
  ImagePtr frame = uniform(c.nx, c.ny, rng, -1, 1);
  return {frame, uniform(c.kx, c.ky, rng, 0, 1)};
}

void expect_listing41(const Image& frame, const Image& psf, const Outputs& outputs) {
  const std::vector<double> ref = edge_wrap(plane(frame), plane(psf));
  for (auto& [name, out] : outputs) {
    ASSERT_EQ(out->nx, frame.nx) << name;
    ASSERT_EQ(out->ny, frame.ny) << name;
    EXPECT_LT(relative_frobenius(as_double(*out), ref), kConvolveTolerance) << name;
  }
}

void expect_every_method(const ConvolveCase& c, bool random, const std::string& backend, const Convolve& convolve,
                         bool auto_picks_direct) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(random ? "random inputs, seed " + std::to_string(seed) : std::string("fixed inputs"));
  if (random) std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  const auto [frame, psf] = case_inputs(c, random, rng);
  const ImagePtr direct = convolve(frame, psf, "direct"), fft = convolve(frame, psf, "fft"),
                 automatic = convolve(frame, psf, "auto");
  expect_listing41(*frame, *psf,
                   {{backend + " direct", direct}, {backend + " fft", fft}, {backend + " auto", automatic}});
  EXPECT_TRUE(std::equal(automatic->pixels.begin(), automatic->pixels.end(),
                         (auto_picks_direct ? direct : fft)->pixels.begin()))
      << backend << " auto is not the method its cost model names";
}

}  // namespace uvflow::test
