// kernels.wproj against independent references: Schwab's grdsf evaluated in long double from the
// published coefficients, the size and plane-count formulas of WPROJ.md, and a direct
// double-precision DFT of every plane's screen (no FFT) for small kernel sizes; and its disk cache.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <oneapi/tbb/global_control.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/kernel_cache.hpp"
#include "stages/shared/fftw.hpp"
#include "stages/shared/spheroidal.hpp"
#include "stages/kernels/wproj.hpp"
#include "tests/support/spheroidal_ref.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wproj_stack.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kArcsec = kPi / (180.0 * 3600.0);
using cd = std::complex<double>;

struct Case {
  int image_size = 40;
  double cell_arcsec = 60;
  double padding = 1.2;
  int oversample = 4;
  int w_planes = 0;
  int max_conv_size = 2000;
  double threshold = 1e-3;
  double max_w = 5000, min_w = 100, rms_w = 2000;

  std::string str() const {
    std::ostringstream s;
    s.precision(17);
    s << "image_size " << image_size << ", cell_arcsec " << cell_arcsec << ", padding " << padding << ", oversample "
      << oversample << ", w_planes " << w_planes << ", max_conv_size " << max_conv_size << ", threshold " << threshold
      << ", |w| max/min/rms " << max_w << "/" << min_w << "/" << rms_w;
    return s.str();
  }
};

std::map<std::string, ParamValue> params_for(const Case& c, const std::string& cache_dir = "") {
  return {{"image_size", std::int64_t(c.image_size)},
          {"cell_arcsec", c.cell_arcsec},
          {"padding", c.padding},
          {"oversample", std::int64_t(c.oversample)},
          {"w_planes", std::int64_t(c.w_planes)},
          {"max_conv_size", std::int64_t(c.max_conv_size)},
          {"support_threshold", c.threshold},
          {"cache_dir", cache_dir}};
}

std::shared_ptr<const KernelStack> run_stage(const Case& c, const std::string& cache_dir = "") {
  const StageSpec spec = kernels_wproj::spec();
  StageHarness h(spec, "cpu", params_for(c, cache_dir));
  h.set_input("info", w_stats_info(c.max_w, c.min_w, c.rms_w));
  h.process();
  return h.output<KernelStack>("kernels");
}

// Smallest even 2^a 3^b 5^c above int(padding * image_size - 0.5), from the sorted list of all of them.
int grid_size_ref(int image_size, double padding) {
  std::vector<long> smooth;
  for (long a = 1; a < (1L << 40); a *= 2)
    for (long b = a; b < (1L << 40); b *= 3)
      for (long c = b; c < (1L << 40); c *= 5) smooth.push_back(c);
  std::sort(smooth.begin(), smooth.end());
  const long floor_ = long(padding * image_size - 0.5);
  for (long v : smooth)
    if (v > floor_ && v % 2 == 0) return int(v);
  return -1;
}

// The stack of WPROJ.md computed directly: every kernel value is a double-precision DFT of the screen.
struct RefStack {
  int grid_size = 0, planes = 0, conv = 0, o = 0, inner = 0, quarter = 0;
  double max_w = 0, w_scale = 0, dl = 0;
  std::vector<double> taper;
  std::vector<std::vector<cd>> k;  // per plane, quarter x quarter, unnormalised: k[p][iy*quarter + ix]
  double peak = 0;                 // max over planes of |K_p[0][0]|

  cd at(int p, int iy, int ix) const { return k[p][std::size_t(iy) * quarter + ix]; }

  // Support of plane p for threshold thr, capped so that S = o/2 + o*s + 1 fits in the quarter.
  int support(int p, double thr) const {
    int j = quarter - 1;
    while (j > 0 && std::abs(at(p, j, 0)) <= thr && std::abs(at(p, 0, j)) <= thr) --j;
    int s = 1 + int(0.5 + double(j) / o);
    while (o / 2 + o * s + 1 > quarter || 2 * s * o >= conv) --s;
    return s;
  }
};

RefStack reference(const Case& c) {
  RefStack r;
  const double cell = c.cell_arcsec * kArcsec;
  const int n = c.image_size;
  r.o = c.oversample;
  r.grid_size = grid_size_ref(n, c.padding);
  if (c.max_w > 0) {
    const double mid = (c.min_w + c.max_w) / 2;
    r.max_w = 1.05 * c.max_w * (c.rms_w > mid ? c.rms_w / mid : 1.0);
  } else {
    r.max_w = 0.25 / cell;
  }
  if (c.w_planes > 0) {  // OSKAR's sizes; with w_planes 0 the stage's (tested by WProjSizes)
    r.planes = c.w_planes;
    r.conv = std::min(int(c.padding * n), c.max_conv_size);
    r.conv -= r.conv % (2 * r.o);  // a multiple of 2 oversample: inner even and exact
  } else {
    Observation obs;
    obs.max_abs_w = c.max_w, obs.min_abs_w = c.min_w, obs.rms_abs_w = c.rms_w;
    const WProjSizes z = wproj_sizes(
        WProjSettings{n, cell, c.padding, c.oversample, 0, c.max_conv_size, c.threshold}, obs);
    r.planes = z.planes;
    r.conv = z.conv_size;
  }
  r.w_scale = std::pow(r.planes - 1, 2) / r.max_w;
  r.inner = r.conv / r.o;
  r.quarter = r.conv / 2 - 1;
  const double fov = 2 * std::asin(n * std::sin(cell) / 2);  // WPROJ.md: cell = asin(2 sin(fov/2) / n)
  r.dl = (2 * std::sin(fov / 2) * r.o / n) * (double(r.grid_size) / r.conv);
  const int h = r.inner / 2;
  for (int i = 0; i < r.inner; ++i) r.taper.push_back(double(grdsf_ref(std::fabs(double(i - h) / h))));
  std::vector<cd> e(r.conv);  // exp(-2 pi i j / conv)
  for (int j = 0; j < r.conv; ++j) e[j] = std::polar(1.0, -2 * kPi * j / r.conv);
  auto tw = [&](long j) { return e[((j % r.conv) + r.conv) % r.conv]; };
  const int q = r.quarter;
  r.k.resize(r.planes);
  for (int p = 0; p < r.planes; ++p) {
    const double w = p == 0 ? 0.0 : double(p) * p / r.w_scale;  // one plane: w_scale = 0, plane 0 at w = 0
    std::vector<cd> a(std::size_t(r.inner) * q);  // a[iy][kx] = sum over ix of S[iy][ix] exp(-2 pi i ix kx / conv)
    for (int iy = -h; iy < h; ++iy)
      for (int ix = -h; ix < h; ++ix) {
        const double l = r.dl * ix, m = r.dl * iy;
        if (1 - l * l - m * m <= 0) continue;
        const cd s =
            r.taper[ix + h] * r.taper[iy + h] * std::polar(1.0, 2 * kPi * w * (std::sqrt(1 - l * l - m * m) - 1));
        for (int kx = 0; kx < q; ++kx) a[std::size_t(iy + h) * q + kx] += s * tw(long(ix) * kx);
      }
    auto& kp = r.k[p];
    kp.assign(std::size_t(q) * q, 0.0);
    for (int ky = 0; ky < q; ++ky)
      for (int iy = -h; iy < h; ++iy) {
        const cd t = tw(long(iy) * ky);
        for (int kx = 0; kx < q; ++kx) kp[std::size_t(ky) * q + kx] += a[std::size_t(iy + h) * q + kx] * t;
      }
    r.peak = std::max(r.peak, std::abs(kp[0]));
  }
  return r;
}

// Checks every field and value of the stage's stack against the reference; returns the reference.
RefStack expect_matches_reference(const KernelStack& ks, const Case& c) {
  const RefStack r = reference(c);
  EXPECT_EQ(ks.geom.image_size, c.image_size);
  EXPECT_EQ(ks.geom.grid_size, r.grid_size);
  EXPECT_DOUBLE_EQ(ks.geom.cell_rad, c.cell_arcsec * kArcsec);
  EXPECT_EQ(ks.oversample, c.oversample);
  EXPECT_EQ(ks.conv_size, r.conv);
  EXPECT_EQ(ks.planes, r.planes);
  EXPECT_NEAR(ks.max_w, r.max_w, 1e-12 * r.max_w);
  EXPECT_NEAR(ks.w_scale, r.w_scale, 1e-12 * r.w_scale);
  if (ks.planes != r.planes || int(ks.support.size()) != r.planes) return r;

  // Supports: a value within 0.1 % of the threshold may fall either side in single precision.
  const double thr = c.threshold * r.peak;
  for (int p = 0; p < r.planes; ++p) {
    EXPECT_GE(ks.support[p], r.support(p, thr * (1 + 1e-3))) << "plane " << p;
    EXPECT_LE(ks.support[p], r.support(p, thr * (1 - 1e-3))) << "plane " << p;
  }
  const int o = c.oversample, s0 = ks.support[0];
  double norm = 0;
  for (int iy = -s0; iy <= s0; ++iy)
    for (int ix = -s0; ix <= s0; ++ix) norm += r.at(0, std::abs(iy) * o, std::abs(ix) * o).real();

  std::int64_t start = 0;
  double worst = 0;
  for (int p = 0; p < r.planes; ++p) {
    const int S = o / 2 + o * ks.support[p] + 1;
    EXPECT_EQ(ks.half_size(p), S);
    EXPECT_EQ(ks.quarter_start[p], start) << "plane " << p;
    double err2 = 0, ref2 = 0;
    for (int iy = 0; iy < S; ++iy)
      for (int ix = 0; ix < S; ++ix) {
        const cd want = r.at(p, iy, ix) / norm;
        const cd got(ks.quarter[start + std::int64_t(iy) * S + ix]);
        worst = std::max(worst, std::abs(got - want));
        err2 += std::norm(got - want);
        ref2 += std::norm(want);
      }
    EXPECT_LT(std::sqrt(err2 / ref2), 1e-5) << "plane " << p << " relative Frobenius error";
    start += std::int64_t(S) * S;
  }
  EXPECT_EQ(std::int64_t(ks.quarter.size()), start);
  EXPECT_LT(worst, 2e-6 * r.peak / norm) << "largest error relative to the kernel peak";

  // Plane 0 sums to 1 at integer offsets.
  double sum0 = 0;
  for (int iy = -s0; iy <= s0; ++iy)
    for (int ix = -s0; ix <= s0; ++ix)
      sum0 += ks.quarter[std::int64_t(std::abs(iy) * o) * ks.half_size(0) + std::abs(ix) * o].real();
  EXPECT_NEAR(sum0, 1.0, 1e-5);
  return r;
}

std::string supports(const KernelStack& ks) {
  std::string s;
  for (auto v : ks.support) s += std::to_string(v) + " ";
  return s;
}

// ---------------------------------------------------------------- grdsf

TEST(Grdsf, MatchesThePublishedCoefficientsInLongDouble) {
  for (double nu : {0.0, 0.1, 0.25, 0.5, 0.7, 0.749999, 0.75, 0.8, 0.9, 0.99, 1.0})
    EXPECT_NEAR(grdsf(nu), double(grdsf_ref(nu)), 1e-14 * double(grdsf_ref(nu))) << "nu " << nu;
  // Values computed separately (Python, double) from the coefficients: 1 at the centre, p0/q0 at the ends.
  EXPECT_NEAR(grdsf(0.0), 0.9999996673648565, 1e-12);
  EXPECT_NEAR(grdsf(std::nextafter(0.75, 0.0)), 0.08203343, 1e-12);
  EXPECT_NEAR(grdsf(1.0), 0.004028559, 1e-12);
  EXPECT_NEAR(grdsf(0.75), 0.08203339556360159, 1e-12);
}

TEST(Grdsf, IsContinuousAtTheJoinAndZeroOutside) {
  const double below = grdsf(std::nextafter(0.75, 0.0)), at = grdsf(0.75);
  EXPECT_NEAR(below, at, 1e-6 * at) << "the two rational pieces meet at nu = 0.75";
  EXPECT_EQ(grdsf(std::nextafter(1.0, 2.0)), 0.0);
  EXPECT_EQ(grdsf(1.5), 0.0);
  EXPECT_EQ(grdsf(-0.1), 0.0);
  EXPECT_GT(grdsf(1.0), 0.0);
  for (double nu = 0; nu < 1; nu += 1.0 / 64) EXPECT_GT(grdsf(nu), grdsf(nu + 1.0 / 64)) << "decreasing at " << nu;
}

TEST(Grdsf, RandomPointsMatchTheReference) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> nu(-0.2, 1.2);
  for (int i = 0; i < 1000; ++i) {
    const double x = nu(rng);
    EXPECT_NEAR(grdsf(x), double(grdsf_ref(x)), 1e-14) << "nu " << x;
  }
}

// ---------------------------------------------------------------- sizes and plane counts

TEST(WProjSizes, GridSizeIsTheNextEven5SmoothNumber) {
  EXPECT_EQ(wproj_grid_size(512, 1.2), 640);
  EXPECT_EQ(wproj_grid_size(4096, 1.2), 5000);
  EXPECT_EQ(wproj_grid_size(15000, 1.2), 18000);  // EL56-82's grid
  EXPECT_EQ(wproj_grid_size(512, 1.0), 512);
  for (double pad : {1.0, 1.2, 1.37, 2.0, 3.9})
    for (int n = 2; n <= 5000; n += 2) ASSERT_EQ(wproj_grid_size(n, pad), grid_size_ref(n, pad)) << n << " x " << pad;
}

TEST(WProjSizes, PlaneCountAndWScaleFollowTheFormulas) {
  struct W {
    double max, min, rms;
    int given;
  };
  const WProjSettings base{8192, 1.0 * kArcsec, 1.2, 4, 0, 2000, 1e-3};
  for (W w : {W{10000, 50, 3000, 0}, W{10000, 0, 9000, 0}, W{10, 0, 5, 0}, W{0, 0, 0, 0}, W{10000, 50, 3000, 100},
              W{500, 100, 300, 1}}) {
    Case c;
    c.image_size = base.image_size;
    c.cell_arcsec = 1.0;
    c.padding = base.padding;
    c.w_planes = w.given;
    c.max_w = w.max, c.min_w = w.min, c.rms_w = w.rms;
    SCOPED_TRACE(c.str());
    WProjSettings s = base;
    s.w_planes = w.given;
    Observation obs;
    obs.max_abs_w = w.max, obs.min_abs_w = w.min, obs.rms_abs_w = w.rms;
    const WProjSizes z = wproj_sizes(s, obs);
    const double mid = (w.min + w.max) / 2;
    const double max_w = w.max > 0 ? 1.05 * w.max * (w.rms > mid ? w.rms / mid : 1.0) : 0.25 / s.cell_rad;
    // Automatic: enough planes for a w-plane phase error 2 pi delta_w |n - 1| within
    // sqrt(0.4e-3 / 0.05) at the image corners (delta_w: half the last gap), never fewer than OSKAR's.
    const double l = s.image_size * std::sin(s.cell_rad) / 2, n1 = 1 - std::sqrt(1 - 2 * l * l);
    const double delta_w = std::sqrt(0.4e-3 / 0.05) / (2 * kPi * n1);
    const int by_phase = w.max > 0 ? int(std::ceil(std::sqrt(w.max * max_w) / delta_w + 0.5)) + 1 : 1;
    const int planes = w.given ? w.given
                               : std::max(by_phase, std::max(16, int(max_w * std::fabs(std::sin(s.cell_rad * s.image_size / 2)))));
    EXPECT_NEAR(z.max_w, max_w, 1e-12 * max_w);
    EXPECT_EQ(z.planes, planes);
    EXPECT_NEAR(z.w_scale, double(planes - 1) * (planes - 1) / max_w, 1e-12 * z.w_scale);
    EXPECT_EQ(z.geom.grid_size, 10000);  // above int(9830.4 - 0.5) = 9829; 9830 = 2 * 5 * 983
    EXPECT_EQ(z.conv_size, 2000);
    EXPECT_EQ(z.inner, 500);
    EXPECT_NEAR(z.dl, std::sin(s.cell_rad) * 4 * z.geom.grid_size / 2000.0, 1e-15);
  }
}

TEST(WProjSizes, RealisticDataGiveHundredsOfPlanes) {
  // OSKAR's 1.05 * 10000 * sin(4096 arcsec) = 208.5 planes leave a w-plane phase error of 0.12 rad at
  // the corners of this 2.3-degree field; 286 bring it within 0.089 (the automatic settings' share).
  Observation obs;
  obs.max_abs_w = 10000, obs.min_abs_w = 10, obs.rms_abs_w = 2500;
  const WProjSizes z = wproj_sizes(WProjSettings{8192, 1.0 * kArcsec, 1.2, 4, 0, 2000, 1e-3}, obs);
  EXPECT_EQ(z.planes, 286);
}

TEST(WProjSizes, RejectsUnusableWStatistics) {
  Observation obs;
  obs.max_abs_w = std::nan("");
  EXPECT_THROW(wproj_sizes(WProjSettings{512, 2 * kArcsec, 1.2, 4, 0, 2000, 1e-3}, obs), InputError);
  obs.max_abs_w = 10, obs.min_abs_w = 20;
  EXPECT_THROW(wproj_sizes(WProjSettings{512, 2 * kArcsec, 1.2, 4, 0, 2000, 1e-3}, obs), InputError);
}

TEST(WProjParams, ConfigureRejectsInconsistentParameters) {
  const StageSpec spec = kernels_wproj::spec();
  auto param_of = [&](Case c) -> std::string {
    try {
      StageHarness h(spec, "cpu", params_for(c));
    } catch (const ParamError& e) {
      return e.param();
    }
    return "";
  };
  Case c;
  c.image_size = 41;
  EXPECT_EQ(param_of(c), "image_size");
  c = Case{};
  c.oversample = 5;
  EXPECT_EQ(param_of(c), "oversample");
  c = Case{};
  c.image_size = 4096, c.cell_arcsec = 3600;
  EXPECT_EQ(param_of(c), "cell_arcsec");
  c = Case{};
  c.oversample = 8, c.max_conv_size = 16;  // no room for a support of 1
  EXPECT_EQ(param_of(c), "max_conv_size");
  EXPECT_EQ(param_of(Case{}), "");
}

// ---------------------------------------------------------------- the stack against a direct DFT

TEST(WProjStack, MatchesDirectDftOfTheScreen) {
  Case c;  // 40 pixels of 60": grid 48, conv_size 48, inner 12, 30 planes (OSKAR's count, given)
  c.w_planes = 30;
  SCOPED_TRACE(c.str());
  auto ks = run_stage(c);
  SCOPED_TRACE("supports " + supports(*ks));
  expect_matches_reference(*ks, c);
  EXPECT_EQ(ks->planes, 30);
  EXPECT_GT(ks->support[ks->planes - 1], ks->support[0]) << "supports grow with w";
  EXPECT_EQ(ks->support[ks->planes - 1], 5) << "the last planes reach the cap of the kept quarter";
}

TEST(WProjStack, MatchesDirectDftWithCappedFftGivenPlanesAndRmsScaling) {
  Case c;
  c.image_size = 32, c.cell_arcsec = 90, c.padding = 1.5, c.oversample = 2, c.max_conv_size = 40;
  c.w_planes = 20, c.max_w = 3000, c.min_w = 0, c.rms_w = 2000;  // rms > mid: max_w scaled by 4/3
  SCOPED_TRACE(c.str());
  auto ks = run_stage(c);
  SCOPED_TRACE("supports " + supports(*ks));
  expect_matches_reference(*ks, c);
  EXPECT_EQ(ks->conv_size, 40);
}

TEST(WProjStack, MatchesDirectDftOnRandomSettings) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto pick = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  for (int trial = 0; trial < 3; ++trial) {
    Case c;
    c.image_size = 2 * pick(12, 32);
    c.cell_arcsec = uni(20, 150);
    c.padding = uni(1.0, 1.6);
    c.oversample = 2 * pick(1, 4);
    const int smallest = std::max(16, 3 * c.oversample + 4);  // 16: max_conv_size's own minimum
    c.max_conv_size = pick(0, 2) == 0 ? pick(smallest, std::max(smallest, int(c.padding * c.image_size))) : 2000;
    c.w_planes = pick(0, 3) == 0 ? pick(1, 40) : 0;
    c.threshold = std::pow(10.0, uni(-4, -2));
    c.max_w = pick(0, 5) == 0 ? 0.0 : uni(100, 5000);
    c.min_w = uni(0, c.max_w);
    c.rms_w = uni(c.min_w, c.max_w);
    SCOPED_TRACE(c.str());
    const StageSpec spec = kernels_wproj::spec();
    try {
      StageHarness probe(spec, "cpu", params_for(c));
    } catch (const ParamError&) {
      continue;  // e.g. a cap too small for the oversampling: covered by ConfigureRejectsInconsistentParameters
    }
    std::shared_ptr<const KernelStack> ks;
    try {
      ks = run_stage(c);
    } catch (const InputError& e) {
      // Automatic planes whose widest kernel needs an FFT above a small cap: refused, naming the cap
      // (tests/wproj_epsilon_test.cpp covers the message).
      EXPECT_TRUE(c.w_planes == 0 && c.max_conv_size < 2000) << e.what();
      EXPECT_NE(std::string(e.what()).find("raise max_conv_size"), std::string::npos) << e.what();
      continue;
    }
    SCOPED_TRACE("supports " + supports(*ks));
    expect_matches_reference(*ks, c);
  }
}

TEST(WProjStack, KernelsAreSymmetricInUAndV) {
  Case c;
  auto ks = run_stage(c);
  for (int p = 0; p < ks->planes; ++p) {
    const int S = ks->half_size(p);
    const cfloat* k = ks->quarter.data() + ks->quarter_start[p];
    const double peak = std::abs(k[0]);
    double worst = 0;
    for (int iy = 0; iy < S; ++iy)
      for (int ix = 0; ix < iy; ++ix) worst = std::max(worst, double(std::abs(k[iy * S + ix] - k[ix * S + iy])));
    EXPECT_LT(worst, 1e-6 * peak) << "plane " << p;
  }
}

TEST(WProjStack, PlaneZeroIsRealWhereTheTaperIsEven) {
  // conv_size = 2 * (inner/2) * oversample here, so the taper's unpaired first sample (index -inner/2)
  // contributes only real values at integer offsets; elsewhere it bounds the imaginary part.
  Case c;
  auto ks = run_stage(c);
  const RefStack r = reference(c);
  ASSERT_EQ(r.conv, r.inner * c.oversample);
  const int o = c.oversample, S = ks->half_size(0), s0 = ks->support[0];
  const cfloat* k = ks->quarter.data();
  double norm = 0, taper_sum = 0;
  for (int iy = -s0; iy <= s0; ++iy)
    for (int ix = -s0; ix <= s0; ++ix) norm += r.at(0, std::abs(iy) * o, std::abs(ix) * o).real();
  for (double t : r.taper) taper_sum += t;
  const double peak = std::abs(k[0]);
  const double edge_bound = 2 * r.taper[0] * taper_sum / norm;
  for (int iy = 0; iy < S; ++iy)
    for (int ix = 0; ix < S; ++ix) {
      if (iy % o == 0 && ix % o == 0)
        EXPECT_LT(std::abs(k[iy * S + ix].imag()), 1e-6 * peak) << iy << ", " << ix;
      else
        EXPECT_LT(std::abs(k[iy * S + ix].imag()), edge_bound + 1e-6 * peak) << iy << ", " << ix;
    }
  EXPECT_LT(edge_bound, 2e-3 * peak) << "the unpaired sample is small";
}

// ---------------------------------------------------------------- cache

void expect_identical(const KernelStack& a, const KernelStack& b) {
  EXPECT_EQ(a.geom, b.geom);
  EXPECT_EQ(a.oversample, b.oversample);
  EXPECT_EQ(a.conv_size, b.conv_size);
  EXPECT_EQ(a.planes, b.planes);
  EXPECT_EQ(a.w_scale, b.w_scale);
  EXPECT_EQ(a.max_w, b.max_w);
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(*x.data())) == 0;
  };
  EXPECT_TRUE(same(a.support, b.support));
  EXPECT_TRUE(same(a.quarter_start, b.quarter_start));
  EXPECT_TRUE(same(a.quarter, b.quarter));
  EXPECT_TRUE(same(a.rows_start, b.rows_start));
  EXPECT_TRUE(same(a.rows, b.rows));
  EXPECT_TRUE(same(a.footprint_sum, b.footprint_sum));
}

std::vector<std::filesystem::path> cache_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> v;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".bin") v.push_back(e.path());
  return v;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void spit(const std::filesystem::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

TEST(WProjCache, RoundTripIsBitIdentical) {
  TempDir dir;
  const std::string cache = (dir / "kernels").string();
  Case c;
  auto made = run_stage(c, cache);
  auto files = cache_files(cache);
  ASSERT_EQ(files.size(), 1u);
  auto loaded = run_stage(c, cache);
  expect_identical(*made, *loaded);
  expect_matches_reference(*loaded, c);
  // Another parameter set gets its own file.
  Case other = c;
  other.threshold = 2e-3;
  run_stage(other, cache);
  EXPECT_EQ(cache_files(cache).size(), 2u);
}

TEST(WProjCache, CorruptTruncatedOrMismatchedFilesAreRecomputed) {
  TempDir dir;
  const std::string cache = (dir / "kernels").string();
  Case c;
  auto made = run_stage(c, cache);
  const auto file = cache_files(cache).at(0);
  const std::string good = slurp(file);

  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;  // one bit in the kernel values
  spit(file, flipped);
  auto again = run_stage(c, cache);
  expect_identical(*made, *again);
  EXPECT_EQ(slurp(file), good) << "the corrupt file is replaced";

  spit(file, good.substr(0, good.size() / 3));
  expect_identical(*made, *run_stage(c, cache));
  EXPECT_EQ(slurp(file), good);

  // A file of other parameters under this name (as after a hash collision).
  Case other = c;
  other.threshold = 2e-3;
  TempDir dir2;
  run_stage(other, (dir2 / "k").string());
  spit(file, slurp(cache_files(dir2 / "k").at(0)));
  expect_identical(*made, *run_stage(c, cache));
  EXPECT_EQ(slurp(file), good);
}

TEST(WProjCache, ManyPlanesAreMeasuredOnceAndTheWisdomKept) {
  // On one thread 64 planes are enough for the stage to measure its FFT plans and keep the wisdom.
  tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  TempDir dir;
  const std::string cache = (dir / "kernels").string();
  Case c;
  c.w_planes = 64;
  auto made = run_stage(c, cache);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(cache) / "fftwf.wisdom"));
  expect_matches_reference(*made, c);
}

TEST(WProjCache, EmptyCacheDirWritesNothing) {
  TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  run_stage(Case{}, "");
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace

// What kernels.wproj logs while making the stack for (image_size, cell_arcsec, oversample, w_planes)
// with all |w| 0 (max_w 0.25 / cell), cached in cache_dir ("": uncached).
std::string wproj_log(int image_size, double cell_arcsec, int oversample, int w_planes, const std::string& cache_dir = "") {
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_st>(log)));
  StageHarness h(kernels_wproj::spec(), "cpu",
                 {{"image_size", std::int64_t(image_size)}, {"cell_arcsec", cell_arcsec},
                  {"oversample", std::int64_t(oversample)}, {"w_planes", std::int64_t(w_planes)}, {"cache_dir", cache_dir}});
  h.set_input("info", w_stats_info(0, 0, 0));
  h.process();
  spdlog::set_default_logger(previous);
  return log.str();
}

// A 128-pixel image at oversample 16 with 16 w-planes given leaves its 128-point FFT (padding x
// image_size) room for supports up to 3, narrower than the kernels: they are truncated, and the log
// says so and what helps, whether the stack was made or read from the cache. At oversample 4 they
// fit; with w_planes automatic the FFT is sized for them.
TEST(KernelsWproj, WarnsWhenSupportsAreTruncated) {
  TempDir dir;
  const std::string cache = (dir / "kernels").string();
  for (const char* run : {"made", "from the cache"}) {
    SCOPED_TRACE(run);
    const std::string warned = wproj_log(128, 400, 16, 16, cache);
    EXPECT_NE(warned.find("16 of 16 planes have kernels wider than the largest support a 128-point FFT holds at "
                          "oversample 16 (3)"),
              std::string::npos)
        << warned;
    EXPECT_NE(warned.find("lower oversample, or leave w_planes or oversample 0 (automatic), which sizes the FFT for "
                          "the widest kernel; max_conv_size does not help"),
              std::string::npos)
        << warned;
  }
  EXPECT_NE(wproj_log(128, 400, 16, 16, cache).find("loaded from"), std::string::npos);
  const std::string quiet = wproj_log(128, 400, 4, 16);
  EXPECT_EQ(quiet.find("truncated"), std::string::npos) << quiet;
  const std::string automatic = wproj_log(128, 400, 16, 0);
  EXPECT_EQ(automatic.find("truncated"), std::string::npos) << automatic;
}

// FFTW wisdom goes into a folder made for it, and a file that already holds it is not rewritten
// (every stage that plans exports at the end of its planning).
TEST(FftwWisdom, ExportMakesTheFolderAndLeavesAnUnchangedFileAlone) {
  TempDir dir;
  const auto file = dir / "a" / "b" / "fftwf.wisdom";
  ASSERT_TRUE(fftw::export_wisdom(file));
  ASSERT_TRUE(std::filesystem::exists(file));
  const auto past = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24);
  std::filesystem::last_write_time(file, past);
  ASSERT_TRUE(fftw::export_wisdom(file));
  EXPECT_EQ(std::filesystem::last_write_time(file), past);
}

// fftw::wrapped against what the image transforms take from it: the indices lo..hi modulo n, each
// once, in ascending disjoint bands, each band a run of consecutive positions in lo..hi (a column
// chunk of fft.grid_to_image or fft.image_to_grid is a run of pixels); an axis held whole from
// lo != 0 as two bands. Fixed cases and fresh random ones, ranges from empty to longer than the axis.
TEST(Wrapped, BandsAreRunsOfTheIndicesInOrder) {
  EXPECT_EQ(fftw::wrapped(22, 65, 44), (fftw::Bands{{0, 22}, {22, 44}}));  // an unpadded 44^2 image
  EXPECT_EQ(fftw::wrapped(0, 43, 44), (fftw::Bands{{0, 44}}));
  EXPECT_EQ(fftw::wrapped(40, 47, 44), (fftw::Bands{{0, 4}, {40, 44}}));
  EXPECT_EQ(fftw::wrapped(-3, 2, 44), (fftw::Bands{{0, 3}, {41, 44}}));
  EXPECT_EQ(fftw::wrapped(5, 4, 44), fftw::Bands{});
  for (std::uint64_t seed : seeds(43)) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 2000; ++trial) {
      const int n = std::uniform_int_distribution<int>(1, 50)(rng), lo = std::uniform_int_distribution<int>(-120, 120)(rng);
      const int count = std::uniform_int_distribution<int>(0, n + 3)(rng), hi = lo + count - 1;
      SCOPED_TRACE(std::to_string(lo) + ".." + std::to_string(hi) + " of " + std::to_string(n));
      const fftw::Bands bands = fftw::wrapped(lo, hi, n);
      const auto pos = [&](int i) { return ((i - lo) % n + n) % n; };  // where index i is in lo..hi
      std::vector<int> held(n, 0);
      int last_end = 0;
      for (auto [a, b] : bands) {
        ASSERT_TRUE(a >= last_end && a < b && b <= n) << "[" << a << ", " << b << ")";
        last_end = b;
        for (int i = a; i < b; ++i) ++held[i];
        for (int i = a; i + 1 < b; ++i) ASSERT_EQ(pos(i + 1), pos(i) + 1) << "band [" << a << ", " << b << ") wraps";
      }
      for (int i = 0; i < n; ++i) ASSERT_EQ(held[i], pos(i) < count ? 1 : 0) << "index " << i;
    }
  }
}

// fftw::PrunedFft against the 2-D DFT from its definition, in double, where its result is read:
// forward, every row of the kept columns, the input zero outside the row bands; backward, every
// column of the kept rows, the input zero outside the column bands; forward from a source to a
// sink, and backward from a source. Sizes (nx and ny apart) and bands at random: widths that are
// not multiples of kChunk, one or two bands, the last column and row included.
TEST(PrunedFft, MatchesTheDirectDftWhereItIsRead) {
  constexpr double kPi = 3.14159265358979323846;
  for (std::uint64_t seed : seeds(20261205)) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 6; ++trial) {
      const int nx = std::uniform_int_distribution<int>(2, 70)(rng), ny = std::uniform_int_distribution<int>(2, 70)(rng);
      const int sign = trial % 2 ? FFTW_BACKWARD : FFTW_FORWARD;
      auto band = [&](int n) {  // one band [a, b)
        const int a = std::uniform_int_distribution<int>(0, n - 1)(rng);
        return fftw::Bands{{a, std::uniform_int_distribution<int>(a + 1, n)(rng)}};
      };
      auto two_bands = [&](int n) {  // the first and the last: a band wrapping around the edge
        const int cut = std::uniform_int_distribution<int>(1, std::max(1, n - 1))(rng);
        return fftw::Bands{{0, cut / 2 + 1}, {std::min(n - 1, cut + 1), n}};
      };
      // The bands where data is: rows forward, columns backward.
      const bool two = trial >= 4;
      const fftw::Bands rows = two && sign == FFTW_FORWARD ? two_bands(ny) : band(ny);
      const fftw::Bands cols = two && sign == FFTW_BACKWARD ? two_bands(nx) : band(nx);
      auto in_bands = [](const fftw::Bands& b, int i) {
        return std::any_of(b.begin(), b.end(), [i](auto r) { return i >= r.first && i < r.second; });
      };
      SCOPED_TRACE(std::to_string(nx) + " x " + std::to_string(ny) + (sign == FFTW_FORWARD ? ", forward" : ", backward"));
      std::normal_distribution<float> z;
      const std::size_t cells = std::size_t(nx) * ny;
      auto buf = fftw::alloc(cells);
      for (int y = 0; y < ny; ++y)
        for (int x = 0; x < nx; ++x) {
          const bool data = sign == FFTW_FORWARD ? in_bands(rows, y) : in_bands(cols, x);
          buf[std::size_t(y) * nx + x] = data ? cfloat(z(rng), z(rng)) : cfloat(0);
        }
      const std::vector<cfloat> input(buf.get(), buf.get() + cells);
      auto dft = [&](int ky, int kx) {  // the reference at (row, column)
        std::complex<double> sum = 0;
        for (int y = 0; y < ny; ++y)
          for (int x = 0; x < nx; ++x)
            sum += std::complex<double>(input[std::size_t(y) * nx + x]) *
                   std::polar(1.0, sign * 2 * kPi * (double(long(kx) * x % nx) / nx + double(long(ky) * y % ny) / ny));
        return sum;
      };
      // Relative RMS error of `at` (row, column -> result) over the cells where the result is read.
      auto expect_close = [&](auto at, const char* what) {
        double err2 = 0, ref2 = 0;
        for (int ky = 0; ky < ny; ++ky)
          for (int kx = 0; kx < nx; ++kx) {
            if (!(sign == FFTW_FORWARD ? in_bands(cols, kx) : in_bands(rows, ky))) continue;
            const std::complex<double> ref = dft(ky, kx);
            err2 += std::norm(std::complex<double>(at(ky, kx)) - ref);
            ref2 += std::norm(ref);
          }
        if (ref2 > 0) {
          EXPECT_LT(std::sqrt(err2 / ref2), 1e-5) << what;
        }
      };
      auto in_buffer = [&](int ky, int kx) { return buf[std::size_t(ky) * nx + kx]; };

      fftw::PrunedFft(buf.get(), nx, ny, sign, rows, cols, FFTW_ESTIMATE).run();
      expect_close(in_buffer, "in place");

      // From a source: NaN in every cell the transform must neither read nor write.
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::fill(buf.get(), buf.get() + cells, cfloat(nan, nan));
      std::vector<int> handed(nx, 0);
      std::mutex m;
      if (sign == FFTW_BACKWARD) {
        // Into a buffer never set: each column with data is asked for once, the others are zeroed
        // where they are read.
        fftw::PrunedFft(buf.get(), nx, ny, sign, rows, cols, FFTW_ESTIMATE).run([&](int c0, int nc, cfloat* values) {
          std::lock_guard lk(m);
          for (int c = 0; c < nc; ++c) {
            ++handed[c0 + c];
            for (int y = 0; y < ny; ++y) values[std::size_t(c) * ny + y] = input[std::size_t(y) * nx + c0 + c];
          }
        });
        expect_close(in_buffer, "backward from a source");
      } else {
        // To a sink: the buffer's rows without data stay untouched, each kept column is handed over once.
        std::vector<cfloat> out(cells);
        fftw::PrunedFft(buf.get(), nx, ny, sign, rows, cols, FFTW_ESTIMATE)
            .run(input.data(), [&](int c0, int nc, const cfloat* values) {
              std::lock_guard lk(m);
              for (int c = 0; c < nc; ++c) {
                ++handed[c0 + c];
                for (int y = 0; y < ny; ++y) out[std::size_t(y) * nx + c0 + c] = values[std::size_t(c) * ny + y];
              }
            });
        expect_close([&](int ky, int kx) { return out[std::size_t(ky) * nx + kx]; }, "forward to a sink");
        for (int y = 0; y < ny; ++y)
          if (!in_bands(rows, y)) {
            EXPECT_TRUE(std::isnan(buf[std::size_t(y) * nx].real())) << "row " << y << " was written";
          }
      }
      for (int x = 0; x < nx; ++x) EXPECT_EQ(handed[x], in_bands(cols, x) ? 1 : 0) << "column " << x;
    }
  }
}

// ---- Outputs, signals and errors: the kernel cache (docs/reliability.md)

namespace {

// Sets an environment variable for a scope.
struct Env {
  std::string name;
  std::optional<std::string> old;
  Env(const char* n, const std::string& v) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    setenv(n, v.c_str(), 1);
  }
  ~Env() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
  }
};

}  // namespace

// By default the cache is under $XDG_CACHE_HOME/uvflow (not ./.cache), and the log says how big it
// has grown.
TEST(KernelCache, DefaultsToTheUsersCacheFolder) {
  TempDir dir;
  Env xdg("XDG_CACHE_HOME", (dir / "xdg").string());
  const auto cwd = std::filesystem::current_path();
  std::filesystem::create_directory(dir / "work");
  std::filesystem::current_path(dir / "work");
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_st>(log)));
  {
    auto params = params_for(Case{});
    params.erase("cache_dir");
    StageHarness h(kernels_wproj::spec(), "cpu", params);
    h.set_input("info", w_stats_info(5000, 100, 2000));
    h.process();
  }
  spdlog::set_default_logger(previous);
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(std::filesystem::is_empty(dir / "work")) << "nothing under the current folder";
  const auto entries = kernel_cache::list(dir / "xdg" / "uvflow" / "kernels");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].path.filename().string().rfind("wproj-", 0), 0u);
  EXPECT_NE(log.str().find("cached the stack (" + bytes_text(entries[0].bytes) + ") in " +
                           (dir / "xdg" / "uvflow" / "kernels").string() + "; the cache holds " +
                           bytes_text(entries[0].bytes) + " of its 4.0 GiB cap"),
            std::string::npos)
      << log.str();
}

// Past the cap, the least recently used stacks go first; files the cache did not write stay.
TEST(KernelCache, EvictsTheLeastRecentlyUsed) {
  TempDir dir;
  const auto now = std::filesystem::file_time_type::clock::now();
  std::vector<std::filesystem::path> stacks;
  for (int i = 0; i < 4; ++i) {
    char name[40];
    std::snprintf(name, sizeof name, "wproj-%016x.bin", i);
    stacks.push_back(dir.write(name, std::string(1000, 'k')));
    std::filesystem::last_write_time(stacks.back(), now - std::chrono::hours(10 - i));  // 0 oldest
  }
  dir.write("notes.txt", std::string(5000, 'n'));
  kernel_cache::touch(stacks[0]);  // read just now: the most recently used
  const auto t = kernel_cache::trim(dir.path(), 2500);
  EXPECT_EQ(t.removed, 2);
  EXPECT_EQ(t.removed_bytes, 2000u);
  EXPECT_EQ(t.total, 2000u);
  EXPECT_TRUE(std::filesystem::exists(stacks[0]));
  EXPECT_FALSE(std::filesystem::exists(stacks[1]));
  EXPECT_FALSE(std::filesystem::exists(stacks[2]));
  EXPECT_TRUE(std::filesystem::exists(stacks[3]));
  EXPECT_TRUE(std::filesystem::exists(dir / "notes.txt"));
}

TEST(KernelCache, CapFromTheEnvironment) {
  {
    Env cap("UVFLOW_CACHE_MAX", "500M");
    EXPECT_EQ(kernel_cache::cap_bytes(), 500ull << 20);
  }
  {
    Env cap("UVFLOW_CACHE_MAX", "0");
    EXPECT_EQ(kernel_cache::cap_bytes(), 0u);
  }
  {
    Env cap("UVFLOW_CACHE_MAX", "lots");
    EXPECT_THROW(kernel_cache::cap_bytes(), InputError);
  }
  Env unset("UVFLOW_CACHE_MAX", "");
  EXPECT_EQ(kernel_cache::cap_bytes(), 4ull << 30);
}

// FFTW's planner aborts ("assertion failed") when an allocation fails; uvflow turns that into an
// OutOfMemory error. In a child process allowed 64 MiB more address space than it has, plan a
// transform of a prime length 16777259 (Bluestein's algorithm: its tables alone need about 512
// MiB): exit 7 when it threw.
[[noreturn]] void plan_with_little_memory() {
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  const rlim_t limit = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(64) << 20);
  rlimit lim{limit, limit};
  setrlimit(RLIMIT_AS, &lim);
  cfloat one[2];
  try {
    auto make = [&] {
      return fftwf_plan_dft_1d(16777259, fftw::as_fftw(one), fftw::as_fftw(one), FFTW_FORWARD, FFTW_ESTIMATE);
    };
    fftw::plan_or_throw(1, make, "a test transform");
  } catch (const std::bad_alloc& e) {
    std::fprintf(stderr, "%s\n", error_text(e).c_str());
    std::exit(7);
  }
  std::exit(0);
}

TEST(FftwDeathTest, PlannerOutOfMemoryIsAnError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(plan_with_little_memory(), ::testing::ExitedWithCode(7),
              "out of memory: could not allocate FFTW's plan tables or buffers");
}
