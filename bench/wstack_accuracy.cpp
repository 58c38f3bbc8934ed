// grid.wstack's and degrid.wstack's achieved accuracy against a direct double-precision DFT, per
// requested epsilon: bench/results/wstack_accuracy.md. Random point-source skies over the whole
// field (its corners and edges always included); visibilities from the simulator's SKA1-Low array
// (io.simulate, preset tiny, its real station layout) on a narrow and a wide field, and random uvw
// with a large w range, SKA-Low-like (short baselines, 57-degree field) and SKA-Mid-like (long
// baselines, 1.8-degree field; no SKA-Mid layout ships with uvflow). The gridder's error is
// ||image - DFT|| / ||DFT|| over every pixel; the degridder's ||V - V_DFT|| / ||V_DFT|| for a model
// image with every pixel random.
//   build/bench/wstack_accuracy [skies, default 3]   (prints the table of wstack_accuracy.md)
#include <oneapi/tbb/parallel_for.h>

#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <ctime>
#include <array>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "runtime/harness.hpp"
#include "runtime/units.hpp"
#include "stages/io/simulate.hpp"
#include "stages/shared/wstack.hpp"

using namespace uvflow;

namespace {

constexpr double kPi = std::numbers::pi;

struct Vis {
  std::vector<float> u, v, w;
  std::vector<cfloat> c;
};

struct Case {
  std::string name;
  int npix;
  double cell_arcsec;
  bool simulated;             // io.simulate tiny, else random uvw
  double uv_max = 0, w_max = 0;
};

double n_minus_1(double l, double m) { return std::sqrt(1 - l * l - m * m) - 1; }

Vis visibilities(const Case& k, std::mt19937_64& rng) {
  Vis vis;
  if (k.simulated) {
    StageHarness sim(io_simulate::spec(), "cpu", {{"preset", std::string("tiny")}, {"stations", std::int64_t(32)}});
    sim.run_source();
    for (auto& p : sim.outputs("vis")) {
      auto b = std::dynamic_pointer_cast<const VisBlock>(p);
      for (std::size_t i = 0; i < b->size(); ++i) vis.u.push_back(b->uu[i]), vis.v.push_back(b->vv[i]), vis.w.push_back(b->ww[i]);
    }
  } else {
    std::uniform_real_distribution<double> uv(-k.uv_max, k.uv_max), w(-k.w_max, k.w_max);
    for (int i = 0; i < 3000; ++i) vis.u.push_back(float(uv(rng))), vis.v.push_back(float(uv(rng))), vis.w.push_back(float(w(rng)));
  }
  return vis;
}

double grid_error(const Case& k, const Vis& uvw, double eps, std::mt19937_64& rng, double* seconds) {
  const int N = k.npix;
  const double cell = k.cell_arcsec * kArcsecToRad;
  std::uniform_int_distribution<int> pos(0, N - 1);
  std::vector<std::array<double, 3>> sky{{0, 0, 1}, {double(N - 1), double(N - 1), 1.5}, {0, double(N / 2), 0.8}, {double(N / 2), 0, 1.2}};
  for (int i = 0; i < 6; ++i) sky.push_back({double(pos(rng)), double(pos(rng)), 1.0});
  Vis vis = uvw;
  vis.c.resize(vis.u.size());
  tbb::parallel_for(std::size_t(0), vis.u.size(), [&](std::size_t i) {
    std::complex<double> s = 0;
    for (auto& src : sky) {
      const double l = (N / 2 - src[0]) * cell, m = (src[1] - N / 2) * cell;
      s += src[2] * std::polar(1.0, 2 * kPi * (vis.u[i] * l + vis.v[i] * m + vis.w[i] * n_minus_1(l, m)));
    }
    vis.c[i] = cfloat(s);
  });
  std::vector<double> ref(std::size_t(N) * N);
  tbb::parallel_for(0, N, [&](int y) {
    for (int x = 0; x < N; ++x) {
      const double l = (N / 2 - x) * cell, m = (y - N / 2) * cell, n1 = n_minus_1(l, m);
      double s = 0;
      for (std::size_t i = 0; i < vis.u.size(); ++i) {
        const double ph = 2 * kPi * (vis.u[i] * l + vis.v[i] * m + vis.w[i] * n1);
        s += vis.c[i].real() * std::cos(ph) + vis.c[i].imag() * std::sin(ph);
      }
      ref[std::size_t(y) * N + x] = s;
    }
  });
  const wstack::Engine e({.image_size = N, .cell_rad = cell, .epsilon = eps, .padding = 2.0, .double_grid = eps <= 1e-5});
  const auto t0 = std::chrono::steady_clock::now();
  const auto img = e.grid(vis.u.data(), vis.v.data(), vis.w.data(), vis.c.data(), vis.c.size());
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double d = 0, r = 0;
  for (std::size_t i = 0; i < img.size(); ++i) d += (img[i] - ref[i]) * (img[i] - ref[i]), r += ref[i] * ref[i];
  return std::sqrt(d / r);
}

double degrid_error(const Case& k, const Vis& vis, double eps, std::mt19937_64& rng) {
  const int N = k.npix;
  const double cell = k.cell_arcsec * kArcsecToRad;
  std::uniform_real_distribution<double> pix(-1, 1);
  std::vector<float> image(std::size_t(N) * N);
  for (auto& p : image) p = float(pix(rng));
  const std::size_t n = std::min<std::size_t>(vis.u.size(), 1000);
  std::vector<std::complex<double>> ref(n);
  tbb::parallel_for(std::size_t(0), n, [&](std::size_t i) {
    std::complex<double> s = 0;
    for (int y = 0; y < N; ++y)
      for (int x = 0; x < N; ++x) {
        const double l = (N / 2 - x) * cell, m = (y - N / 2) * cell;
        s += double(image[std::size_t(y) * N + x]) * std::polar(1.0, 2 * kPi * (vis.u[i] * l + vis.v[i] * m + vis.w[i] * n_minus_1(l, m)));
      }
    ref[i] = s;
  });
  const wstack::Engine e({.image_size = N, .cell_rad = cell, .epsilon = eps, .padding = 2.0});
  std::vector<cfloat> out(n);
  e.degrid(image.data(), vis.u.data(), vis.v.data(), vis.w.data(), n, out.data());
  double d = 0, r = 0;
  for (std::size_t i = 0; i < n; ++i) d += std::norm(std::complex<double>(out[i]) - ref[i]), r += std::norm(ref[i]);
  return std::sqrt(d / r);
}

}  // namespace

int main(int argc, char** argv) {
  const int skies = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::vector<Case> cases = {
      {"SKA1-Low (io.simulate tiny, 32 stations), narrow: 128 px of 60\"", 128, 60, true},
      {"SKA1-Low (io.simulate tiny, 32 stations), wide: 128 px of 1200\" (43 deg)", 128, 1200, true},
      {"SKA-Low-like random uvw (|uv| < 400, |w| < 300), 96 px of 2150\" (57 deg)", 96, 2150, false, 400, 300},
      {"SKA-Mid-like random uvw (|uv| < 5000, |w| < 3000), 96 px of 70\"", 96, 70, false, 5000, 3000},
  };
  const double epsilons[] = {1e-2, 1e-3, 1e-4, 1e-5, 1e-6};
  std::mt19937_64 rng(20261124);
  std::printf("| data | requested epsilon | W | w-planes | gridder: worst rel L2 over %d skies | degridder: rel L2 | gridder time (s) |\n|---|---|---|---|---|---|---|\n", skies);
  for (const Case& k : cases) {
    const Vis vis = visibilities(k, rng);
    for (double eps : epsilons) {
      double worst = 0, secs = 0;
      for (int s = 0; s < skies; ++s) {
        double t;
        worst = std::max(worst, grid_error(k, vis, eps, rng, &t));
        secs += t / skies;
      }
      const double deg = degrid_error(k, vis, eps, rng);
      const wstack::Engine e({.image_size = k.npix, .cell_rad = k.cell_arcsec * kArcsecToRad, .epsilon = eps, .padding = 2.0});
      double wmin = 1e300, wmax = 0;
      for (float w : vis.w) wmin = std::min(wmin, double(std::fabs(w))), wmax = std::max(wmax, double(std::fabs(w)));
      std::printf("| %s (%zu vis) | %.0e | %d | %d | %.2e %s | %.2e %s | %.3f |\n", k.name.c_str(), vis.u.size(), eps,
                  e.kernel().support, e.planes(wmin, wmax).count, worst, worst <= eps ? "ok" : "**over**", deg,
                  deg <= eps ? "ok" : "**over**", secs);
      std::fflush(stdout);
    }
  }
}
