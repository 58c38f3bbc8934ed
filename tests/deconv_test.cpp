// Deconvolution: vis.unit, deconv.hogbom against a direct Hogbom written here on random point-source
// skies convolved with random array-like PSFs, the restoring-beam fit on analytic elliptical
// Gaussians of known axes and angle, deconv.restore against a direct convolution and the beam in
// io.write_fits' header (pipelines/clean_image.yaml's major cycles: tests/loop_test.cpp).
#include <fitsio.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <random>
#include <sstream>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/deconv/clark.hpp"
#include "stages/deconv/hogbom.hpp"
#include "stages/deconv/restore.hpp"
#include "stages/io/write_fits.hpp"
#include "stages/shared/clean.hpp"
#include "stages/vis/unit.hpp"
#include "tests/support/gauss_fit.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

constexpr double kPi = std::numbers::pi;
const double kFwhm = 2 * std::sqrt(2 * std::log(2.0));

std::shared_ptr<Image> make_image(int nx, int ny, std::vector<float> px, double cell_rad = 1e-4) {
  auto img = std::make_shared<Image>();
  img->nx = nx;
  img->ny = ny;
  img->pixels = Array<float>::host(px.size());
  std::copy(px.begin(), px.end(), img->pixels.begin());
  img->wcs = SkyWcs{.cell_rad = cell_rad, .freq_hz = 1e8};
  return img;
}

// An array-like PSF, n x n, centred on (n/2, n/2): the mean of cos(2 pi (u x + v y) / n) over
// random baselines (Gaussian distributed, an elongated coverage rotated by a random angle), so it
// peaks at 1, has sidelobes, and is a positive-definite function as a dirty beam is.
struct ArrayPsf {
  std::vector<double> u, v;
  double at(double x, double y) const {
    double s = 0;
    for (std::size_t k = 0; k < u.size(); ++k) s += std::cos(2 * kPi * (u[k] * x + v[k] * y));
    return s / double(u.size());
  }
};
ArrayPsf random_psf(std::mt19937_64& rng) {
  std::normal_distribution<double> g(0, 1);
  std::uniform_real_distribution<double> ang(0, kPi), stretch(1.0, 2.0), scale(0.05, 0.09);
  const double a = ang(rng), s = stretch(rng), sc = scale(rng);  // cycles per pixel
  ArrayPsf p;
  for (int k = 0; k < 2000; ++k) {
    const double x = g(rng) * sc * s, y = g(rng) * sc;
    p.u.push_back(x * std::cos(a) - y * std::sin(a));
    p.v.push_back(x * std::sin(a) + y * std::cos(a));
  }
  return p;
}

struct Src {
  int x, y;
  double flux;
};

// A direct Hogbom CLEAN in double precision, with the PSF evaluated from its formula.
struct RefComponent {
  int x, y;
  double flux;
};
std::vector<RefComponent> reference_hogbom(std::vector<double> res, int n, const ArrayPsf& formula, double gain,
                                           int niter, double threshold, const std::vector<std::uint8_t>* mask = nullptr) {
  // The PSF at every shift an n x n image can need, from the formula.
  std::vector<double> table(std::size_t(4 * n * n));
  for (int y = -n; y < n; ++y)
    for (int x = -n; x < n; ++x) table[std::size_t((y + n) * 2 * n + x + n)] = formula.at(x, y);
  auto psf = [&](int x, int y) { return table[std::size_t((y + n) * 2 * n + x + n)]; };
  std::vector<RefComponent> out;
  for (int it = 0; it < niter; ++it) {
    int best = -1;
    for (int k = 0; k < n * n; ++k)
      if ((!mask || (*mask)[std::size_t(k)]) && (best < 0 || std::abs(res[std::size_t(k)]) > std::abs(res[std::size_t(best)])))
        best = k;
    if (best < 0 || std::abs(res[std::size_t(best)]) <= threshold) break;
    const int bx = best % n, by = best / n;
    const double f = gain * res[std::size_t(best)];
    out.push_back({bx, by, f});
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) res[std::size_t(y * n + x)] -= f * psf(x - bx, y - by);
  }
  return out;
}

struct Case {
  int n = 64;
  ArrayPsf psf;
  std::shared_ptr<Image> psf_img, dirty;
  std::vector<double> dirty_d;
  std::vector<Src> sky;
};

// Random sources on pixel centres, at least 6 pixels apart, in the inner part of an n x n image; the
// dirty image is their sum of PSFs (the PSF image is 2n, so every shift is inside it).
Case random_case(std::uint64_t seed, int nsrc) {
  std::mt19937_64 rng(seed);
  Case c;
  c.psf = random_psf(rng);
  const int n = c.n, m = 2 * n;
  std::vector<double> table(std::size_t(m * m));
  for (int y = 0; y < m; ++y)
    for (int x = 0; x < m; ++x) table[std::size_t(y * m + x)] = c.psf.at(x - n, y - n);
  c.psf_img = make_image(m, m, std::vector<float>(table.begin(), table.end()));
  std::uniform_int_distribution<int> pix(8, n - 9);
  std::uniform_real_distribution<double> flux(1, 10);
  while (int(c.sky.size()) < nsrc) {
    Src s{pix(rng), pix(rng), flux(rng)};
    bool far = true;
    // Two main lobes apart (the widest random PSF's is about 7.5 pixels across at half power):
    // closer sources share flux between their pixels, and no CLEAN then meets 1 % on each.
    for (auto& t : c.sky) far &= std::max(std::abs(t.x - s.x), std::abs(t.y - s.y)) >= 15;
    if (far) c.sky.push_back(s);
  }
  c.dirty_d.assign(std::size_t(n * n), 0.0);
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x)
      for (auto& s : c.sky) c.dirty_d[std::size_t(y * n + x)] += s.flux * table[std::size_t((y - s.y + n) * m + x - s.x + n)];
  c.dirty = make_image(n, n, std::vector<float>(c.dirty_d.begin(), c.dirty_d.end()));
  return c;
}

struct HogbomRun {
  std::shared_ptr<const Image> model, residual;
};
HogbomRun run_hogbom(const Case& c, const deconv_hogbom::Params& p) {
  StageHarness h(deconv_hogbom::spec(), "cpu", deconv_hogbom::decl, p);
  h.set_input("dirty", c.dirty);
  h.set_input("psf", c.psf_img);
  h.process();
  h.commit_outputs();
  return {h.output<Image>("model"), h.output<Image>("residual")};
}

// ---------------------------------------------------------------- vis.unit

TEST(VisUnit, ReplacesVisibilitiesKeepsEverythingElse) {
  auto b = std::make_shared<VisBlock>();
  b->index = 3;
  b->uu = Array<float>::from(std::vector<float>{1, 2, 3});
  b->vv = Array<float>::from(std::vector<float>{4, 5, 6});
  b->ww = Array<float>::from(std::vector<float>{7, 8, 9});
  b->vis = Array<cfloat>::from(std::vector<cfloat>{{2, 1}, {-1, 0}, {0, 5}});
  b->weight = Array<float>::from(std::vector<float>{0.5f, 2, 3});
  StageHarness h(vis_unit::spec(), "cpu");
  h.process({{"vis", b}});
  auto out = h.output<VisBlock>("vis");
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ(out->index, 3);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(out->vis[k], cfloat(1, 0));
    EXPECT_EQ(out->weight[k], b->weight[k]);
    EXPECT_EQ(out->uu[k], b->uu[k]);
  }
  EXPECT_EQ(b->vis[0], cfloat(2, 1));  // the input is left as it was
}

// ---------------------------------------------------------------- deconv.hogbom

TEST(Hogbom, SameComponentsAsDirectImplementation) {
  for (auto seed : seeds(12)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Case c = random_case(seed, 4);
    const int niter = 150;
    auto ref = reference_hogbom(c.dirty_d, c.n, c.psf, 0.1, niter, 0);
    auto r = run_hogbom(c, {.gain = 0.1, .niter = niter});
    // The same components (pixels and fluxes) in the model as the reference's, summed per pixel.
    std::vector<double> model(std::size_t(c.n * c.n), 0.0);
    for (auto& k : ref) model[std::size_t(k.y * c.n + k.x)] += k.flux;
    double max_flux = 0;
    for (auto& s : c.sky) max_flux = std::max(max_flux, s.flux);
    for (std::size_t k = 0; k < model.size(); ++k)
      ASSERT_NEAR(r.model->pixels[k], model[k], 2e-4 * max_flux) << "pixel " << k % c.n << ", " << k / c.n;
  }
}

TEST(Hogbom, RecoversSourceFluxesAndPositions) {
  for (auto seed : seeds(7)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Case c = random_case(seed, 5);
    auto r = run_hogbom(c, {.gain = 0.1, .niter = 5000, .threshold = 1e-3});
    double total = 0;
    for (std::size_t k = 0; k < r.model->pixels.size(); ++k) total += r.model->pixels[k];
    double true_total = 0;
    for (auto& s : c.sky) {
      true_total += s.flux;
      // The flux within 2 pixels of the source, and the brightest component there on its pixel.
      double near = 0, best = 0;
      int bx = -1, by = -1;
      for (int y = s.y - 2; y <= s.y + 2; ++y)
        for (int x = s.x - 2; x <= s.x + 2; ++x) {
          const double f = r.model->pixels[std::size_t(y * c.n + x)];
          near += f;
          if (f > best) best = f, bx = x, by = y;
        }
      EXPECT_NEAR(near, s.flux, 0.01 * s.flux) << "source at " << s.x << ", " << s.y;
      EXPECT_EQ(bx, s.x);
      EXPECT_EQ(by, s.y);
    }
    EXPECT_NEAR(total, true_total, 0.01 * true_total);  // nothing cleaned elsewhere
    float peak = 0;
    for (std::size_t k = 0; k < r.residual->pixels.size(); ++k) peak = std::max(peak, std::abs(r.residual->pixels[k]));
    EXPECT_LE(peak, 1e-3);
    EXPECT_EQ(r.model->wcs->bunit, "JY/PIXEL");
  }
}

TEST(Hogbom, StopsAtNiterAndThreshold) {
  Case c = random_case(3, 3);
  TempDir dir;
  const auto comps = dir / "c.txt";
  auto r = run_hogbom(c, {.gain = 0.1, .niter = 7, .components = comps});
  // The components file: a header, then 7 lines whose fluxes sum to the model's.
  std::ifstream f(comps);
  std::string line;
  std::getline(f, line);
  EXPECT_NE(line.find("stopped by niter"), std::string::npos) << line;
  int lines = 0;
  double sum = 0, last_cleaned = 0;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    int i, x, y;
    double flux, peak, cleaned;
    ASSERT_TRUE(s >> i >> x >> y >> flux >> peak >> cleaned) << line;
    EXPECT_NEAR(flux, 0.1 * peak, 1e-6 * std::abs(peak));
    sum += flux;
    last_cleaned = cleaned;
    ++lines;
  }
  EXPECT_EQ(lines, 7);
  double model_sum = 0;
  for (std::size_t k = 0; k < r.model->pixels.size(); ++k) model_sum += r.model->pixels[k];
  EXPECT_NEAR(model_sum, sum, 1e-5 * std::abs(sum));
  EXPECT_NEAR(last_cleaned, sum, 1e-5 * std::abs(sum));

  // A threshold: the residual's peak ends at or below it, having been above it one component before.
  const double threshold = 0.5;
  auto t = run_hogbom(c, {.gain = 0.2, .niter = 100000, .threshold = threshold});
  float peak = 0;
  for (std::size_t k = 0; k < t.residual->pixels.size(); ++k) peak = std::max(peak, std::abs(t.residual->pixels[k]));
  EXPECT_LE(peak, threshold);
  EXPECT_GT(peak, threshold * (1 - 0.2));  // the last component left 0.8 of a peak above threshold
}

TEST(Hogbom, MaskBoxesConfineComponents) {
  Case c = random_case(5, 3);
  const Src& keep = c.sky[0];
  const Record box{{"x0", keep.x - 3}, {"y0", keep.y - 3}, {"x1", keep.x + 3}, {"y1", keep.y + 3}};
  auto r = run_hogbom(c, {.gain = 0.1, .niter = 300, .boxes = {box}});
  std::vector<std::uint8_t> mask(std::size_t(c.n * c.n), 0);
  for (int y = keep.y - 3; y <= keep.y + 3; ++y)
    for (int x = keep.x - 3; x <= keep.x + 3; ++x) mask[std::size_t(y * c.n + x)] = 1;
  auto ref = reference_hogbom(c.dirty_d, c.n, c.psf, 0.1, 300, 0, &mask);
  std::vector<double> model(std::size_t(c.n * c.n), 0.0);
  for (auto& k : ref) model[std::size_t(k.y * c.n + k.x)] += k.flux;
  for (std::size_t k = 0; k < model.size(); ++k) {
    if (!mask[k]) {
      EXPECT_EQ(r.model->pixels[k], 0.0f);
    }
    ASSERT_NEAR(r.model->pixels[k], model[k], 2e-3) << k;
  }
}

TEST(Hogbom, BadMasksAndThresholdsAreRefused) {
  Case c = random_case(9, 2);
  TempDir dir;
  // A FITS mask of another size: refused in prepare() when the dirty image's size is known.
  const auto mask = dir / "mask.fits";
  {
    StageHarness w(io_write_fits::spec(), "cpu", {{"path", mask.string()}});
    w.process({{"image", make_image(32, 32, std::vector<float>(32 * 32, 1.0f))}});
    w.commit_outputs();
  }
  try {
    StageHarness h(deconv_hogbom::spec(), "cpu", deconv_hogbom::decl, {.mask = mask},
                   PortShapes{{"dirty", PortShape{.nx = c.n, .ny = c.n}}});
    FAIL() << "a 32 x 32 mask for a 64 x 64 image was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("32 x 32"), std::string::npos) << e.what();
  }
  // The same at run time when the size was not known before.
  EXPECT_THROW(run_hogbom(c, {.mask = mask}), InputError);
  // A box outside the image, an empty box, a negative threshold.
  const Record outside{{"x0", 60}, {"y0", 0}, {"x1", 64}, {"y1", 3}};
  EXPECT_THROW(run_hogbom(c, {.boxes = {outside}}), InputError);
  const Record empty{{"x0", 5}, {"y0", 5}, {"x1", 4}, {"y1", 6}};
  EXPECT_THROW(run_hogbom(c, {.boxes = {empty}}), ParamError);
  EXPECT_THROW(run_hogbom(c, {.threshold = -1}), std::invalid_argument);
}

// ---------------------------------------------------------------- deconv.clark

// The largest |residual - (dirty - model convolved with the PSF)|, the PSF from its formula.
double residual_error(const Case& c, const Image& model, const Image& residual) {
  const int n = c.n;
  std::vector<double> table(std::size_t(4 * n * n));
  for (int y = -n; y < n; ++y)
    for (int x = -n; x < n; ++x) table[std::size_t((y + n) * 2 * n + x + n)] = c.psf.at(x, y);
  std::vector<double> want = c.dirty_d;
  for (int cy = 0; cy < n; ++cy)
    for (int cx = 0; cx < n; ++cx)
      if (const double f = model.pixels[std::size_t(cy * n + cx)]; f != 0)
        for (int y = 0; y < n; ++y)
          for (int x = 0; x < n; ++x) want[std::size_t(y * n + x)] -= f * table[std::size_t((y - cy + n) * 2 * n + x - cx + n)];
  double err = 0;
  for (std::size_t k = 0; k < want.size(); ++k) err = std::max(err, std::abs(residual.pixels[k] - want[k]));
  return err;
}

HogbomRun run_clark(const Case& c, const clean::MinorCycleParams& cycle, std::int64_t psf_patch) {
  deconv_clark::Params p{cycle};
  p.psf_patch = psf_patch;
  StageHarness h(deconv_clark::spec(), "cpu", deconv_clark::decl, p);
  h.set_input("dirty", c.dirty);
  h.set_input("psf", c.psf_img);
  h.process();
  return {h.output<Image>("model"), h.output<Image>("residual")};
}

TEST(Clark, WholePsfPatchFindsHogbomsComponents) {
  for (auto seed : seeds(41)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Case c = random_case(seed, 4);
    auto ref = reference_hogbom(c.dirty_d, c.n, c.psf, 0.1, 150, 0);
    auto r = run_clark(c, {.gain = 0.1, .niter = 150}, 2 * c.n);
    std::vector<double> model(std::size_t(c.n * c.n), 0.0);
    for (auto& k : ref) model[std::size_t(k.y * c.n + k.x)] += k.flux;
    for (std::size_t k = 0; k < model.size(); ++k)
      ASSERT_NEAR(r.model->pixels[k], model[k], 2e-3) << "pixel " << k % c.n << ", " << k / c.n;
    EXPECT_LT(residual_error(c, *r.model, *r.residual), 2e-4);
  }
}

TEST(Clark, RecoversSourcesResidualIsDirtyLessModelConvolvedWithPsf) {
  for (auto seed : seeds(43)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Case c = random_case(seed, 5);
    auto r = run_clark(c, {.gain = 0.1, .niter = 5000, .threshold = 1e-3}, 6);
    for (auto& s : c.sky) {
      double near = 0;
      for (int y = s.y - 2; y <= s.y + 2; ++y)
        for (int x = s.x - 2; x <= s.x + 2; ++x) near += r.model->pixels[std::size_t(y * c.n + x)];
      EXPECT_NEAR(near, s.flux, 0.01 * s.flux) << "source at " << s.x << ", " << s.y;
    }
    double peak = 0;
    for (std::size_t k = 0; k < r.residual->pixels.size(); ++k) peak = std::max(peak, double(std::abs(r.residual->pixels[k])));
    const double max_err = residual_error(c, *r.model, *r.residual);
    EXPECT_LT(max_err, 2e-4);
    EXPECT_LE(peak, 1e-3);
  }
}

// ---------------------------------------------------------------- beam fit and restore

// exp(-u^2 / 2 smaj^2 - v^2 / 2 smin^2), u along the major axis at `pa_deg` east (-x) of north (+y).
double elliptical(double x, double y, double fwhm_maj, double fwhm_min, double pa_deg) {
  const double pa = pa_deg * kPi / 180;
  const double u = -x * std::sin(pa) + y * std::cos(pa), v = x * std::cos(pa) + y * std::sin(pa);
  const double smaj = fwhm_maj / kFwhm, smin = fwhm_min / kFwhm;
  return std::exp(-u * u / (2 * smaj * smaj) - v * v / (2 * smin * smin));
}

// The tests' own Gaussian fitter (the flux measure of loop_test), on elliptical Gaussians of random
// shape, position off the pixel grid and amplitude, with and without noise.
TEST(GaussianFit, RecoversRandomEllipticalGaussians) {
  for (auto seed : test::seeds(3)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    const long n = 64;
    const double amp = 0.5 + 2 * u(rng), x0 = 32 + u(rng) - 0.5, y0 = 31 + u(rng) - 0.5;
    const double sa = 2 + 2 * u(rng), sb = 1.5 + u(rng), th = std::numbers::pi * u(rng);
    for (const double noise : {0.0, 0.01}) {
      std::normal_distribution<double> g(0, noise > 0 ? noise : 1);
      std::vector<float> img(std::size_t(n * n));
      for (long y = 0; y < n; ++y)
        for (long x = 0; x < n; ++x) {
          const double c = std::cos(th), s = std::sin(th), dx = double(x) - x0, dy = double(y) - y0;
          const double a = (c * dx + s * dy) / sa, b = (-s * dx + c * dy) / sb;
          img[std::size_t(y * n + x)] = float(amp * std::exp(-0.5 * (a * a + b * b)) + (noise > 0 ? noise * g(rng) : 0));
        }
      const test::Gaussian2D f = test::fit_gaussian(img, n, n, 32, 31, 8, 2.0);
      const double tol = noise > 0 ? 0.01 : 1e-5;  // relative (noise: 1 % of the peak per pixel)
      EXPECT_NEAR(f.amplitude, amp, tol * amp);
      EXPECT_NEAR(f.x0, x0, 10 * tol);
      EXPECT_NEAR(f.y0, y0, 10 * tol);
      EXPECT_NEAR(f.sigma_major, std::max(sa, sb), 10 * tol * sa);
      EXPECT_NEAR(f.sigma_minor, std::min(sa, sb), 10 * tol * sa);
    }
  }
}

TEST(BeamFit, AnalyticEllipticalGaussians) {
  constexpr double kCellDeg = 2.0 / 3600;
  for (auto seed : seeds(21)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> maj(2.5, 12), ratio(0.3, 0.95), pa(-89.9, 90);
    for (int t = 0; t < 20; ++t) {
      const double a = maj(rng), b = a * ratio(rng), p = pa(rng);
      const int n = 128;
      std::vector<float> px(std::size_t(n * n));
      for (int y = 0; y < n; ++y)
        for (int x = 0; x < n; ++x) px[std::size_t(y * n + x)] = float(elliptical(x - n / 2, y - n / 2, a, b, p));
      auto img = make_image(n, n, px, kCellDeg * kPi / 180);
      const Beam beam = clean::to_beam(clean::fit_main_lobe(*img, 0.35, "test"), img->wcs->cell_rad);
      EXPECT_NEAR(beam.bmaj_deg / kCellDeg, a, 0.01 * a) << "pa " << p;
      EXPECT_NEAR(beam.bmin_deg / kCellDeg, b, 0.01 * b) << "pa " << p;
      const double d = std::fmod(beam.bpa_deg - p + 630.0, 180.0) - 90.0;  // modulo 180
      EXPECT_LT(std::abs(d), 1.0) << "fitted " << beam.bpa_deg << ", true " << p;
      EXPECT_GT(beam.bpa_deg, -90.0);
      EXPECT_LE(beam.bpa_deg, 90.0);
    }
  }
}

// WSClean's fit (beam_fit wsclean) counts only the quadrant x, y >= 0 of its box: a bump left of and
// below the centre leaves it at the Gaussian while it moves the main-lobe fit; an exact Gaussian is
// recovered.
TEST(BeamFit, WscleanFitCountsOnlyTheUpperRightQuadrant) {
  constexpr double kCellDeg = 2.0 / 3600;
  for (auto seed : seeds(23)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> maj(3, 8), ratio(0.4, 0.9), pa(-89.9, 90);
    const double a = maj(rng), b = a * ratio(rng), p = pa(rng);
    const int n = 256;
    std::vector<float> px(std::size_t(n * n));
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        const double dx = x - n / 2, dy = y - n / 2;
        // The bump: 0.4 at (-a, -a), nothing at x >= 0 or y >= 0.
        const double bump = dx < 0 && dy < 0 ? 0.4 * std::exp(-((dx + a) * (dx + a) + (dy + a) * (dy + a)) / (a * a)) : 0.0;
        px[std::size_t(y * n + x)] = float(elliptical(dx, dy, a, b, p) + bump);
      }
    auto img = make_image(n, n, px, kCellDeg * kPi / 180);
    const Beam ws = clean::to_beam(clean::fit_wsclean(*img, 0.35, 10, "test"), img->wcs->cell_rad);
    const Beam lobe = clean::to_beam(clean::fit_main_lobe(*img, 0.35, "test"), img->wcs->cell_rad);
    EXPECT_NEAR(ws.bmaj_deg / kCellDeg, a, 1e-3 * a);
    EXPECT_NEAR(ws.bmin_deg / kCellDeg, b, 1e-3 * b);
    EXPECT_LT(std::abs(std::fmod(ws.bpa_deg - p + 630.0, 180.0) - 90.0), 0.1) << "fitted " << ws.bpa_deg << ", true " << p;
    EXPECT_GT(std::abs(lobe.bmaj_deg / kCellDeg - a) + std::abs(lobe.bmin_deg / kCellDeg - b), 0.02 * a);
  }
}

TEST(BeamFit, PositionAngleIsEastOfNorth) {
  // A beam at 30 degrees east of north is longer towards the upper left (east = -x, north = +y).
  auto g = clean::from_beam({.bmaj_deg = 10, .bmin_deg = 4, .bpa_deg = 30}, kPi / 180);
  auto value = [&](double x, double y) { return std::exp(-(g.a * x * x + 2 * g.b * x * y + g.c * y * y)); };
  const double s = std::sin(kPi / 6), c = std::cos(kPi / 6);
  EXPECT_NEAR(value(-3 * s, 3 * c), std::exp(-9 * 4 * std::log(2.0) / 100), 1e-12);  // along the major axis
  EXPECT_GT(value(-3 * s, 3 * c), value(3 * s, 3 * c));
  const Beam back = clean::to_beam(g, kPi / 180);
  EXPECT_NEAR(back.bmaj_deg, 10, 1e-9);
  EXPECT_NEAR(back.bmin_deg, 4, 1e-9);
  EXPECT_NEAR(back.bpa_deg, 30, 1e-9);
}

TEST(Restore, DirectConvolutionPlusResidualAndBeamInFits) {
  for (auto seed : seeds(31)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const int n = 96, m = 2 * n;
    const double a = 6, b = 3.5, pa = std::uniform_real_distribution<double>(-80, 80)(rng);
    std::vector<float> pp(std::size_t(m * m));
    for (int y = 0; y < m; ++y)
      for (int x = 0; x < m; ++x) pp[std::size_t(y * m + x)] = float(elliptical(x - n, y - n, a, b, pa));
    std::vector<float> model(std::size_t(n * n), 0.0f), res(std::size_t(n * n));
    std::uniform_int_distribution<int> pix(0, n - 1);
    std::normal_distribution<float> noise(0, 0.01f);
    for (int k = 0; k < 12; ++k) model[std::size_t(pix(rng) * n + pix(rng))] += float(k + 1) * 0.25f;
    for (auto& r : res) r = noise(rng);
    const double cell = 1e-4;
    StageHarness h(deconv_restore::spec(), "cpu");
    h.set_input("model", make_image(n, n, model, cell));
    h.set_input("residual", make_image(n, n, res, cell));
    h.set_input("psf", make_image(m, m, pp, cell));
    h.process();
    auto out = h.output<Image>("image");
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        double want = res[std::size_t(y * n + x)];
        for (int cy = 0; cy < n; ++cy)
          for (int cx = 0; cx < n; ++cx)
            if (float f = model[std::size_t(cy * n + cx)]; f != 0) want += f * elliptical(x - cx, y - cy, a, b, pa);
        ASSERT_NEAR(out->pixels[std::size_t(y * n + x)], want, 1e-4) << x << ", " << y;
      }
    ASSERT_TRUE(out->wcs && out->wcs->beam);
    const double px_deg = cell * 180 / kPi;
    EXPECT_NEAR(out->wcs->beam->bmaj_deg / px_deg, a, 0.01 * a);
    EXPECT_NEAR(out->wcs->beam->bmin_deg / px_deg, b, 0.01 * b);
    EXPECT_NEAR(out->wcs->beam->bpa_deg, pa, 1.0);
    EXPECT_EQ(out->wcs->bunit, "JY/BEAM");

    // io.write_fits writes the beam: BMAJ, BMIN, BPA as fitted.
    TempDir dir;
    const auto path = (dir / "restored.fits").string();
    StageHarness w(io_write_fits::spec(), "cpu", {{"path", path}});
    w.process({{"image", out}});
    w.commit_outputs();
    fitsfile* f = nullptr;
    int status = 0;
    double bmaj = 0, bmin = 0, bpa = 0;
    fits_open_file(&f, path.c_str(), READONLY, &status);
    fits_read_key(f, TDOUBLE, "BMAJ", &bmaj, nullptr, &status);
    fits_read_key(f, TDOUBLE, "BMIN", &bmin, nullptr, &status);
    fits_read_key(f, TDOUBLE, "BPA", &bpa, nullptr, &status);
    fits_close_file(f, &status);
    ASSERT_EQ(status, 0);
    EXPECT_NEAR(bmaj, out->wcs->beam->bmaj_deg, 1e-12 * std::abs(bmaj));  // cfitsio writes 15 digits
    EXPECT_NEAR(bmin, out->wcs->beam->bmin_deg, 1e-12 * std::abs(bmin));  // cfitsio writes 15 digits
    EXPECT_NEAR(bpa, out->wcs->beam->bpa_deg, 1e-12 * std::abs(bpa));  // cfitsio writes 15 digits
  }
}

TEST(Restore, NoBeamNoKeywords) {
  // An image without a beam (a dirty image) gets no BMAJ.
  TempDir dir;
  const auto path = (dir / "dirty.fits").string();
  StageHarness w(io_write_fits::spec(), "cpu", {{"path", path}});
  w.process({{"image", make_image(8, 8, std::vector<float>(64, 1.0f))}});
  w.commit_outputs();
  fitsfile* f = nullptr;
  int status = 0;
  double bmaj = 0;
  fits_open_file(&f, path.c_str(), READONLY, &status);
  fits_read_key(f, TDOUBLE, "BMAJ", &bmaj, nullptr, &status);
  EXPECT_EQ(status, KEY_NO_EXIST);
  status = 0;
  fits_close_file(f, &status);
}

}  // namespace
