// The cuda backends of deconv.hogbom, deconv.clark and image.zeros against their cpu backends: on
// random point-source skies convolved with random array-like PSFs (a fixed seed and a fresh one), the
// same components in the same order (Hogbom: the components files equal, the same model, residuals
// and figures; Clark: fluxes and residuals as close as cuFFT and FFTW, until a near-tie parts the
// runs), and restored images within 1e-4 of the peak; a model so far and a mask box; a tie between two
// pixels of equal |value| goes to the lower index on both (hogbom()'s rule); Clark with a PSF patch
// on a large image (direct subtraction on the device); deconv.restore's cuda backend against its cpu
// backend; image.zeros' image on the device. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numbers>
#include <random>
#include <sstream>

#include "runtime/harness.hpp"
#include "runtime/payloads/cycle.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/deconv/clark.hpp"
#include "stages/deconv/hogbom.hpp"
#include "stages/deconv/restore.hpp"
#include "stages/image/zeros.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;

namespace {

class GpuDeconv : public test::GpuTest {
 protected:
  std::shared_ptr<const Image> up(const std::shared_ptr<Image>& img) { return moved(std::shared_ptr<const Image>(img), Location::device); }
  std::shared_ptr<const Image> down(const std::shared_ptr<const Image>& img) { return moved(img, Location::host); }
};

std::shared_ptr<Image> make_image(int nx, int ny, const std::vector<float>& px) {
  auto img = std::make_shared<Image>();
  img->nx = nx, img->ny = ny;
  img->pixels = Array<float>::host(px.size());
  std::copy(px.begin(), px.end(), img->pixels.begin());
  img->wcs = SkyWcs{.cell_rad = 1e-4, .freq_hz = 1e8};
  return img;
}

// An n x n image's dirty image and its 2n x 2n PSF (centred on (n, n)): the PSF the mean of
// cos(2 pi (u x + v y)) over random baselines of an elongated coverage, the sky a few point sources
// plus noise.
struct Case {
  int n = 128;
  std::shared_ptr<Image> dirty, psf;
};
Case random_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::uniform_real_distribution<double> angle(0, std::numbers::pi), flux(0.2, 3.0);
  Case c;
  const int n = c.n, m = 2 * n;
  const double a = angle(rng);
  std::vector<double> u, v;
  for (int k = 0; k < 300; ++k) {
    const double x = g(rng) * 0.12, y = g(rng) * 0.07;
    u.push_back(x * std::cos(a) - y * std::sin(a)), v.push_back(x * std::sin(a) + y * std::cos(a));
  }
  std::vector<double> table(std::size_t(m) * m);
  for (int y = 0; y < m; ++y)
    for (int x = 0; x < m; ++x) {
      double s = 0;
      for (std::size_t k = 0; k < u.size(); ++k) s += std::cos(2 * std::numbers::pi * (u[k] * (x - n) + v[k] * (y - n)));
      table[std::size_t(y) * m + x] = s / double(u.size());
    }
  std::vector<float> psf(table.begin(), table.end()), dirty(std::size_t(n) * n);
  std::uniform_int_distribution<int> pos(8, n - 9);
  for (auto& d : dirty) d = float(0.01 * g(rng));
  for (int s = 0; s < 6; ++s) {
    const int sx = pos(rng), sy = pos(rng);
    const double f = flux(rng);
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) dirty[std::size_t(y) * n + x] += float(f * table[std::size_t(y - sy + n) * m + (x - sx + n)]);
  }
  c.dirty = make_image(n, n, dirty);
  c.psf = make_image(m, m, psf);
  return c;
}

// A large image (2048^2) and a PSF patch of 129^2 (the same kind of PSF, cut): many pixels for the
// noise's medians, and a cycle's components few and small enough for the cuda backend's direct
// subtraction rather than its FFT convolution.
Case patch_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::uniform_real_distribution<double> angle(0, std::numbers::pi), flux(0.2, 3.0);
  Case c;
  c.n = 2048;
  const int n = c.n, m = 129, h = m / 2;
  const double a = angle(rng);
  std::vector<double> u, v;
  for (int k = 0; k < 300; ++k) {
    const double x = g(rng) * 0.12, y = g(rng) * 0.07;
    u.push_back(x * std::cos(a) - y * std::sin(a)), v.push_back(x * std::sin(a) + y * std::cos(a));
  }
  std::vector<float> psf(std::size_t(m) * m), dirty(std::size_t(n) * n);
  for (int y = 0; y < m; ++y)
    for (int x = 0; x < m; ++x) {
      double s = 0;
      for (std::size_t k = 0; k < u.size(); ++k) s += std::cos(2 * std::numbers::pi * (u[k] * (x - h) + v[k] * (y - h)));
      psf[std::size_t(y) * m + x] = float(s / double(u.size()));
    }
  for (auto& d : dirty) d = float(0.01 * g(rng));
  std::uniform_int_distribution<int> pos(0, n - 1);
  for (int s = 0; s < 6; ++s) {
    const int sx = pos(rng), sy = pos(rng);  // near an edge too: the PSF's overlap with the image
    const double f = flux(rng);
    for (int y = std::max(0, sy - h); y < std::min(n, sy + h + 1); ++y)
      for (int x = std::max(0, sx - h); x < std::min(n, sx + h + 1); ++x)
        dirty[std::size_t(y) * n + x] += float(f * psf[std::size_t(y - sy + h) * m + (x - sx + h)]);
  }
  c.dirty = make_image(n, n, dirty);
  c.psf = make_image(m, m, psf);
  return c;
}

struct Cleaned {
  std::shared_ptr<const Image> model, residual;
  std::shared_ptr<const CycleFigures> figures;
  std::string components;  // the components file's text
};

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A minor-cycle stage's `backend` on `c` (inputs moved by `up`), its outputs brought back by `down`.
template <class P, class Up, class Down>
Cleaned minor_cycle(const StageSpec& spec, const StageDecl<P>& decl, const std::string& backend, const Case& c,
                    const std::shared_ptr<Image>& so_far, P p, const test::TempDir& dir, Up up, Down down) {
  p.components = dir / (backend + "-components.txt");
  StageHarness h(spec, backend, decl, p);
  h.set_input("dirty", up(c.dirty));
  h.set_input("psf", up(c.psf));
  if (so_far) h.set_input("model", up(so_far));
  h.process();
  h.commit_outputs();
  return {down(h.output<Image>("model")), down(h.output<Image>("residual")), h.output<CycleFigures>("figures"),
          read_text(*p.components)};
}

template <class Up, class Down>
Cleaned hogbom(const std::string& backend, const Case& c, const std::shared_ptr<Image>& so_far, deconv_hogbom::Params p,
               const test::TempDir& dir, Up up, Down down) {
  return minor_cycle(deconv_hogbom::spec(), deconv_hogbom::decl, backend, c, so_far, p, dir, up, down);
}

// deconv.clark on `backend`: the cpu's inputs as they are, the cuda's moved by `up` and back by `down`.
template <class Up, class Down>
Cleaned clark(const std::string& backend, const Case& c, const deconv_clark::Params& p, const test::TempDir& dir, Up up,
              Down down) {
  if (backend == "cpu")
    return minor_cycle(deconv_clark::spec(), deconv_clark::decl, backend, c, nullptr, p, dir,
                       [](auto i) { return std::shared_ptr<const Image>(i); }, [](auto i) { return i; });
  return minor_cycle(deconv_clark::spec(), deconv_clark::decl, backend, c, nullptr, p, dir, up, down);
}

// A components file's lines: x, y, flux.
struct Line {
  int x, y;
  double flux;
};
std::vector<Line> components(const std::string& text) {
  std::vector<Line> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    long long i;
    Line l{};
    f >> i >> l.x >> l.y >> l.flux;
    out.push_back(l);
  }
  return out;
}

// Clark's components, cuda (b) against cpu (a): the same positions in the same order and fluxes
// within `tol`, up to where the runs part at a near-tie. The two backends' residuals differ by FFT
// rounding (about 2e-7 of the peak), so where two pixels' |values| are that close either may be
// taken first, and from there the runs clean in a different order (1 seed in about 20: seed
// 1800448255, psf_patch 10, parts at component 388 of 400 between -0.00306847063 and
// +0.00306847785). A parting passes only as such a tie: both components' |flux| (gain times the
// |peak| each took) within `tol`. Returns the index where the runs parted, a.size() where they
// did not.
std::size_t same_components_until_a_tie(const std::vector<Line>& a, const std::vector<Line>& b, double tol) {
  EXPECT_EQ(b.size(), a.size());
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (b[i].x != a[i].x || b[i].y != a[i].y) {  // a tie of |value|: the two peaks may differ in sign
      EXPECT_NEAR(std::abs(b[i].flux), std::abs(a[i].flux), tol) << "component " << i + 1;
      std::printf("the runs part at a tie at component %zu of %zu: cpu (%d, %d) %.9g, cuda (%d, %d) %.9g\n", i + 1,
                  a.size(), a[i].x, a[i].y, a[i].flux, b[i].x, b[i].y, b[i].flux);
      return i;
    }
    EXPECT_NEAR(b[i].flux, a[i].flux, tol) << "component " << i + 1;
  }
  return a.size();
}

// Where two Clark runs part at a tie, their residuals cannot be compared; the runs stopped just
// before it can: sets niter to the components they share, for the caller to run both again (false
// when they share none: nothing to compare).
bool until_a_tie(const Cleaned& cpu, const Cleaned& cuda, std::int64_t& niter, double tol) {
  const auto a = components(cpu.components);
  const std::size_t shared = same_components_until_a_tie(a, components(cuda.components), tol);
  if (shared < a.size()) niter = std::int64_t(shared);
  return shared > 0;
}

std::shared_ptr<const Image> restore(const Cleaned& r, const Case& c) {
  StageHarness h(deconv_restore::spec(), "cpu");
  h.set_input("model", r.model);
  h.set_input("residual", r.residual);
  h.set_input("psf", c.psf);
  h.process();
  return h.output<Image>("image");
}

// The largest |b - a| over the pixels, relative to the largest |a|.
double worst_relative(const Image& a, const Image& b) {
  double worst = 0, peak = 0;
  for (std::size_t k = 0; k < a.pixels.size(); ++k) {
    worst = std::max(worst, double(std::abs(b.pixels[k] - a.pixels[k])));
    peak = std::max(peak, double(std::abs(a.pixels[k])));
  }
  return worst / peak;
}

TEST_F(GpuDeconv, HogbomMatchesTheCpuBackend) {
  for (auto seed : test::seeds(71)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Case c = random_case(seed);
    test::TempDir dir;
    // As it is, then with a model so far and a mask box (the loop's second cycle, a masked field).
    std::vector<float> start(c.dirty->pixels.size(), 0.0f);
    start[1000] = 0.25f, start[5000] = -0.5f;
    const std::vector<std::pair<std::shared_ptr<Image>, deconv_hogbom::Params>> runs = {
        {nullptr, {.gain = 0.1, .niter = 500}},
        {make_image(c.n, c.n, start), {.gain = 0.2, .niter = 300, .threshold = 0.05, .boxes = {{{"x0", 10}, {"y0", 20}, {"x1", 100}, {"y1", 90}}}}}};
    for (const auto& [so_far, params] : runs) {
      const Cleaned cpu = hogbom("cpu", c, so_far, params, dir, [](auto i) { return std::shared_ptr<const Image>(i); },
                                 [](auto i) { return i; });
      const Cleaned cuda = hogbom("cuda", c, so_far, params, dir, [&](auto i) { return up(i); }, [&](auto i) { return down(i); });
      EXPECT_GT(cpu.figures->iterations, 50);
      EXPECT_EQ(cuda.components, cpu.components);  // the same components, fluxes and peaks, in the same order
      EXPECT_EQ(cuda.figures->iterations, cpu.figures->iterations);
      EXPECT_EQ(cuda.figures->peak, cpu.figures->peak);
      EXPECT_EQ(cuda.figures->peak_start, cpu.figures->peak_start);
      EXPECT_EQ(cuda.figures->noise, cpu.figures->noise);
      EXPECT_EQ(cuda.figures->model_flux, cpu.figures->model_flux);
      EXPECT_EQ(cuda.figures->stop, cpu.figures->stop);
      double peak = 0, worst_residual = 0;
      for (std::size_t k = 0; k < cpu.model->pixels.size(); ++k) {
        ASSERT_EQ(cuda.model->pixels[k], cpu.model->pixels[k]) << k;
        peak = std::max(peak, double(std::abs(c.dirty->pixels[k])));
        worst_residual = std::max(worst_residual, double(std::abs(cuda.residual->pixels[k] - cpu.residual->pixels[k])));
      }
      EXPECT_LE(worst_residual, 1e-6 * peak);
      const double restored = worst_relative(*restore(cpu, c), *restore(cuda, c));
      EXPECT_LE(restored, 1e-4);
      std::printf("%lld components (stopped by %s); residuals differ by at most %.3g of the peak, restored images by %.3g\n",
                  static_cast<long long>(cpu.figures->iterations), cpu.figures->stop.c_str(), worst_residual / peak,
                  restored);
    }
  }
}

// Clark: the same components in the same order (up to a near-tie, same_components_until_a_tie); their fluxes, the residuals and the restored images
// as close as cuFFT and FFTW agree. The cpu backend subtracts each cycle's components by FFT
// convolution; the cuda backend directly (psf_patch 10: a few components a cycle) or by FFT too
// (psf_patch 128, the whole PSF: no sidelobe outside it, so one cycle takes all 400 components, more
// than the direct subtraction is worth on a 128^2 image).
TEST_F(GpuDeconv, ClarkMatchesTheCpuBackend) {
  for (auto seed : test::seeds(73))
  for (int psf_patch : {10, 128}) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", psf_patch " + std::to_string(psf_patch));
    const Case c = random_case(seed);
    test::TempDir dir;
    deconv_clark::Params params{{.gain = 0.1, .niter = 400}};
    params.psf_patch = psf_patch;
    auto run = [&](const std::string& backend) {
      return clark(backend, c, params, dir, [&](auto i) { return up(i); }, [&](auto i) { return down(i); });
    };
    Cleaned cpu = run("cpu"), cuda = run("cuda");
    EXPECT_GT(components(cpu.components).size(), 50u);
    double peak = 0;
    for (float v : c.dirty->pixels) peak = std::max(peak, double(std::abs(v)));
    const std::int64_t niter = params.niter;
    if (!until_a_tie(cpu, cuda, params.niter, 1e-5 * peak)) continue;
    if (params.niter != niter) cpu = run("cpu"), cuda = run("cuda");  // both stopped before the tie
    const auto a = components(cpu.components);
    EXPECT_EQ(same_components_until_a_tie(a, components(cuda.components), 1e-5 * peak), a.size());
    double worst_residual = 0;
    for (std::size_t k = 0; k < cpu.residual->pixels.size(); ++k)
      worst_residual = std::max(worst_residual, double(std::abs(cuda.residual->pixels[k] - cpu.residual->pixels[k])));
    EXPECT_LE(worst_residual, 1e-5 * peak);
    const double restored = worst_relative(*restore(cpu, c), *restore(cuda, c));
    EXPECT_LE(restored, 1e-4);
    std::printf("clark, psf_patch %d: %zu components; residuals differ by at most %.3g of the peak, restored images by %.3g\n",
                psf_patch, a.size(), worst_residual / peak, restored);
  }
}

// Clark with a PSF patch on a large image (as a major cycle of a large image runs it): each cycle's
// components subtracted directly on the device, by FFT convolution on the cpu; the same components,
// fluxes and residuals as close as that rounding allows, and the same starting figures (the device's
// radix-selected medians are the host's). psf_patch 10: a few components a cycle; 64, the whole
// 129^2 PSF: all 300 in one cycle, more than the device lists at once per tile (256).
TEST_F(GpuDeconv, ClarkWithAPsfPatchMatchesTheCpuBackend) {
  for (auto seed : test::seeds(79))
  for (int psf_patch : {10, 64}) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", psf_patch " + std::to_string(psf_patch));
    const Case c = patch_case(seed);
    test::TempDir dir;
    deconv_clark::Params params{{.gain = 0.1, .niter = 300}};
    params.psf_patch = psf_patch;
    auto run = [&](const std::string& backend) {
      return clark(backend, c, params, dir, [&](auto i) { return up(i); }, [&](auto i) { return down(i); });
    };
    Cleaned cpu = run("cpu"), cuda = run("cuda");
    EXPECT_GT(components(cpu.components).size(), 50u);
    EXPECT_EQ(cuda.figures->peak_start, cpu.figures->peak_start);
    EXPECT_EQ(cuda.figures->noise, cpu.figures->noise);
    EXPECT_GT(cpu.figures->noise, 0.009);  // the 0.01 noise, measured
    const double peak = cpu.figures->peak_start;
    const std::int64_t niter = params.niter;
    if (!until_a_tie(cpu, cuda, params.niter, 1e-5 * peak)) continue;
    if (params.niter != niter) cpu = run("cpu"), cuda = run("cuda");  // both stopped before the tie
    const auto a = components(cpu.components);
    EXPECT_EQ(same_components_until_a_tie(a, components(cuda.components), 1e-5 * peak), a.size());
    EXPECT_NEAR(cuda.figures->model_flux, cpu.figures->model_flux, 1e-5 * peak * double(a.size()));
    double worst_residual = 0;
    for (std::size_t k = 0; k < cpu.residual->pixels.size(); ++k)
      worst_residual = std::max(worst_residual, double(std::abs(cuda.residual->pixels[k] - cpu.residual->pixels[k])));
    EXPECT_LE(worst_residual, 1e-5 * peak);
    std::printf("clark, psf_patch %d on 2048^2: %zu components; residuals differ by at most %.3g of the peak\n", psf_patch,
                a.size(), worst_residual / peak);
  }
}

// deconv.restore's cuda backend against its cpu backend: a cleaned model (components of both signs,
// some at the image's edges) and its residual, restored with each; the same beam, and the images within
// 1e-5 of the peak (single against double precision sums).
TEST_F(GpuDeconv, RestoreMatchesTheCpuBackend) {
  for (auto seed : test::seeds(83)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Case c = random_case(seed);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pos(0, c.n - 1);
    std::uniform_real_distribution<double> flux(-1.0, 3.0);
    std::vector<float> model(c.dirty->pixels.size(), 0.0f);
    for (int k = 0; k < 300; ++k) model[std::size_t(pos(rng)) * c.n + std::size_t(pos(rng))] += float(flux(rng));
    model[0] = 1.5f, model[std::size_t(c.n) * c.n - 1] = -0.5f;  // the corners: Gaussians cut by the edges
    const Cleaned cleaned{make_image(c.n, c.n, model), c.dirty, nullptr, ""};
    const auto cpu = restore(cleaned, c);
    StageHarness h(deconv_restore::spec(), "cuda");
    h.set_input("model", up(make_image(c.n, c.n, model)));
    h.set_input("residual", up(c.dirty));
    h.set_input("psf", c.psf);
    h.process();
    const auto cuda = h.output<Image>("image");
    EXPECT_EQ(cuda->pixels.location(), Location::device);
    const auto host = down(cuda);
    ASSERT_TRUE(host->wcs && host->wcs->beam && cpu->wcs && cpu->wcs->beam);
    EXPECT_EQ(host->wcs->beam->bmaj_deg, cpu->wcs->beam->bmaj_deg);
    EXPECT_EQ(host->wcs->bunit, "JY/BEAM");
    const double worst = worst_relative(*cpu, *host);
    EXPECT_LE(worst, 1e-5);
    EXPECT_GT(worst_relative(*cpu, *c.dirty), 0.1);  // the model made a difference the comparison sees
    std::printf("restore: cuda and cpu within %.3g of the peak\n", worst);
  }
}

// Two pixels of equal |value| (the higher one positive, the lower one negative): both backends take
// the lower index first.
TEST_F(GpuDeconv, TiesGoToTheLowerIndex) {
  const Case c = random_case(3);
  std::vector<float> d(c.dirty->pixels.size(), 0.0f);
  const int lo = 40 * c.n + 70, hi = 90 * c.n + 20;
  d[std::size_t(lo)] = -2.0f, d[std::size_t(hi)] = 2.0f;
  Case tie = c;
  tie.dirty = make_image(c.n, c.n, d);
  test::TempDir dir;
  const Cleaned cpu = hogbom("cpu", tie, nullptr, {.gain = 0.1, .niter = 1}, dir,
                             [](auto i) { return std::shared_ptr<const Image>(i); }, [](auto i) { return i; });
  const Cleaned cuda = hogbom("cuda", tie, nullptr, {.gain = 0.1, .niter = 1}, dir, [&](auto i) { return up(i); },
                              [&](auto i) { return down(i); });
  EXPECT_EQ(cuda.components, cpu.components);
  EXPECT_LT(cpu.model->pixels[std::size_t(lo)], 0.0f);
  EXPECT_LT(cuda.model->pixels[std::size_t(lo)], 0.0f);
  EXPECT_EQ(cuda.model->pixels[std::size_t(hi)], 0.0f);
}

TEST_F(GpuDeconv, ZerosOnTheDevice) {
  const Case c = random_case(5);
  StageHarness h(image_zeros::spec(), "cuda");
  h.set_input("like", up(c.dirty));
  h.process();
  auto out = h.output<Image>("image");
  EXPECT_EQ(out->pixels.location(), Location::device);
  auto host = down(out);
  ASSERT_EQ(host->nx, c.n);
  ASSERT_EQ(host->pixels.size(), c.dirty->pixels.size());
  for (float v : host->pixels) ASSERT_EQ(v, 0.0f);
  ASSERT_TRUE(host->wcs);
  EXPECT_EQ(host->wcs->bunit, "JY/PIXEL");
}

}  // namespace
