#include "stages/shared/wstack.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>

#include "runtime/error.hpp"
#include "stages/shared/fftw.hpp"

namespace uvflow::wstack {
namespace {

constexpr double kPi = std::numbers::pi;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int wrap(int a, int n) {
  a %= n;
  return a < 0 ? a + n : a;
}

// The W taps of one axis at grid position g: the first cell and the kernel at each.
struct AxisTaps {
  int first;
  double k[es::kMaxSupport];
  AxisTaps(const es::Taps& taps, double g) {
    const double left = g - taps.support() / 2.0;
    first = int(std::ceil(left));
    taps.eval(first - left, k);
  }
};

// The visibilities sorted by (first plane p0, grid strip of their first row), flipped to w >= 0.
// A visibility whose first row lies in strip s writes rows of strips s and s + 1 only (strips are
// at least W + 1 rows), so the gridder runs the even strips in parallel, then the odd ones, with
// no two threads on one cell; `strips` is even for that (or 1: one thread, tiny grids).
struct Layout {
  int strips = 1;
  std::vector<std::size_t> order;    // sorted position -> input index
  std::vector<float> u, v, w;        // sorted, flipped
  std::vector<std::uint8_t> flipped;
  std::vector<std::size_t> start;    // key (p0 * strips + s) -> first sorted position; one more at the end
  int row_lo = 0, row_hi = -1;       // the grid rows the visibilities touch, unwrapped
  std::size_t range(int p0_lo, int p0_hi) const {  // visibilities whose first plane is in [p0_lo, p0_hi]
    return start[std::size_t(p0_hi + 1) * strips] - start[std::size_t(p0_lo) * strips];
  }
};

Layout sort_visibilities(const float* u, const float* v, const float* w, std::size_t n, const Planes& pl, int support,
                         int ng, double scale) {
  Layout L;
  const int fit = ng / (support + 1);
  L.strips = fit >= 2 ? std::min(64, fit & ~1) : 1;
  const std::size_t keys = std::size_t(pl.count) * L.strips;
  std::vector<std::uint32_t> key(n);
  std::vector<std::size_t> count(keys + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const bool flip = w[i] < 0;
    const double ww = std::fabs(double(w[i])), vv = flip ? -double(v[i]) : double(v[i]);
    const int p0 = std::clamp(int(std::ceil((ww - pl.w0) / pl.dw - support / 2.0)), 0, pl.count - support);
    const int a = int(std::ceil(vv * scale - support / 2.0)), a0 = wrap(a, ng);
    L.row_lo = std::min(L.row_lo, a), L.row_hi = std::max(L.row_hi, a + support - 1);
    key[i] = std::uint32_t(std::size_t(p0) * L.strips + std::size_t(a0) * L.strips / ng);
    ++count[key[i] + 1];
  }
  for (std::size_t k = 0; k < keys; ++k) count[k + 1] += count[k];
  L.start = count;
  L.order.resize(n);
  L.u.resize(n), L.v.resize(n), L.w.resize(n), L.flipped.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t at = count[key[i]]++;
    const bool flip = w[i] < 0;
    L.order[at] = i;
    L.u[at] = flip ? -u[i] : u[i];
    L.v[at] = flip ? -v[i] : v[i];
    L.w[at] = flip ? -w[i] : w[i];
    L.flipped[at] = flip;
  }
  return L;
}

using fftw::Bands, fftw::wrapped;

// Per quarter pixel (|X|, |Y|), everything the screens need: n - 1 depends on |X| and |Y| only.
struct Screens {
  int half = 0;                              // N/2 + 1 values a side
  std::vector<std::complex<double>> phase;  // exp(-2 pi i w_p t'), advanced plane by plane
  std::vector<std::complex<double>> rot;    // exp(-2 pi i dw t')
  std::vector<double> corr;                 // 1 / psi^(dw t')
  Screens(const Engine& e, const Planes& pl) : half(e.options().image_size / 2 + 1) {
    const std::size_t m = std::size_t(half) * half;
    phase.resize(m), rot.resize(m), corr.resize(m);
    tbb::parallel_for(0, half, [&](int y) {
      for (int x = 0; x < half; ++x) {
        const double t = e.n_minus_1(x, y) - pl.t0;
        const std::size_t q = std::size_t(y) * half + x;
        phase[q] = std::polar(1.0, -2 * kPi * pl.w0 * t);
        rot[q] = std::polar(1.0, -2 * kPi * pl.dw * t);
        corr[q] = e.corr_w(pl.dw, t);
      }
    });
  }
  void advance() {
    tbb::parallel_for(std::size_t(0), phase.size(), [&](std::size_t q) { phase[q] *= rot[q]; });
  }
};

template <class T>
void add_visibility(std::complex<T>* g, int ng, double gu, double gv, double kw, cfloat c, const es::Taps& taps) {
  const int support = taps.support();
  const AxisTaps tu(taps, gu), tv(taps, gv);
  T ku[es::kMaxSupport];
  for (int i = 0; i < support; ++i) ku[i] = T(tu.k[i]);
  // Footprints that do not wrap around the grid's edge (nearly all) write one contiguous run per row.
  const bool contiguous = tu.first >= 0 && tu.first + support <= ng;
  int cols[es::kMaxSupport];
  if (!contiguous)
    for (int i = 0; i < support; ++i) cols[i] = wrap(tu.first + i, ng);
  for (int j = 0; j < support; ++j) {
    const T f = T(tv.k[j] * kw);
    const T re = c.real() * f, im = c.imag() * f;
    T* row = reinterpret_cast<T*>(g + std::size_t(wrap(tv.first + j, ng)) * ng);
    if (contiguous) {
      T* run = row + 2 * tu.first;
      for (int i = 0; i < support; ++i) {
        run[2 * i] += re * ku[i];
        run[2 * i + 1] += im * ku[i];
      }
    } else {
      for (int i = 0; i < support; ++i) {
        row[2 * cols[i]] += re * ku[i];
        row[2 * cols[i] + 1] += im * ku[i];
      }
    }
  }
}

std::complex<double> gather_visibility(const cfloat* g, int ng, double gu, double gv, const es::Taps& taps) {
  const int support = taps.support();
  const AxisTaps tu(taps, gu), tv(taps, gv);
  int cols[es::kMaxSupport];
  for (int i = 0; i < support; ++i) cols[i] = wrap(tu.first + i, ng);
  double re = 0, im = 0;
  for (int j = 0; j < support; ++j) {
    const cfloat* row = g + std::size_t(wrap(tv.first + j, ng)) * ng;
    double rr = 0, ri = 0;
    for (int i = 0; i < support; ++i) {
      rr += tu.k[i] * row[cols[i]].real();
      ri += tu.k[i] * row[cols[i]].imag();
    }
    re += tv.k[j] * rr;
    im += tv.k[j] * ri;
  }
  return {re, im};
}

std::pair<double, double> abs_w_range(const float* w, std::size_t n) {
  double lo = INFINITY, hi = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double a = std::fabs(double(w[i]));
    lo = std::min(lo, a), hi = std::max(hi, a);
  }
  return {n ? lo : 0.0, hi};
}

}  // namespace

Engine::Engine(const Options& o) : opt_(o), kernel_(es::choose(o.epsilon, o.padding)), corr_(es::Correction::of(kernel_)) {
  const int N = o.image_size;
  ng_ = es::good_size(o.padding * N);
  const double half = N / 2 * o.cell_rad, r2 = 2 * half * half;
  if (!(r2 < 1))
    throw InputError("w-stacking: the image's corners (" + std::to_string(N / 2) + " pixels of " +
                     std::to_string(o.cell_rad) + " rad from the centre in l and m) are at or beyond the horizon: "
                     "reduce image_size or cell_arcsec");
  max_n1_ = -n_minus_1(N / 2, N / 2);
}

double Engine::n_minus_1(int X, int Y) const {
  const double l = X * opt_.cell_rad, m = Y * opt_.cell_rad, r2 = l * l + m * m;
  return -r2 / (1 + std::sqrt(1 - r2));  // sqrt(1 - r2) - 1 without cancellation
}

Planes Engine::planes(double min_abs_w, double max_abs_w) const {
  Planes p;
  const int W = kernel_.support;
  p.dw = 1 / (kernel_.sigma * max_n1_);
  p.t0 = -max_n1_ / 2;
  p.w0 = min_abs_w - p.dw * W / 2;
  p.count = int(std::ceil((max_abs_w - min_abs_w) / p.dw)) + W;
  return p;
}

std::vector<double> Engine::grid(const float* u, const float* v, const float* w, const cfloat* c, std::size_t n,
                                 Stats* stats) const {
  const int N = opt_.image_size, ng = ng_, W = kernel_.support;
  const double beta = kernel_.beta, scale = ng * opt_.cell_rad;
  const es::Taps taps(kernel_);
  std::vector<double> acc(std::size_t(N) * N, 0.0);
  if (n == 0) return acc;
  auto t_start = Clock::now();
  const auto [wlo, whi] = abs_w_range(w, n);
  const Planes pl = planes(wlo, whi);
  const Layout L = sort_visibilities(u, v, w, n, pl, W, ng, scale);
  // weight * V, conjugated when flipped, times exp(-2 pi i w t0) (the screens' centring).
  std::vector<cfloat> cs(n);
  tbb::parallel_for(std::size_t(0), n, [&](std::size_t i) {
    const cfloat ci = c[L.order[i]];
    const std::complex<double> ck(ci.real(), L.flipped[i] ? -ci.imag() : ci.imag());
    cs[i] = cfloat(ck * std::polar(1.0, -2 * kPi * double(L.w[i]) * pl.t0));
  });
  Stats st;
  st.sort_s = seconds_since(t_start);
  t_start = Clock::now();
  Screens scr(*this, pl);
  st.screen_s += seconds_since(t_start);

  t_start = Clock::now();
  auto buf = fftw::alloc(std::size_t(ng) * ng);
  std::vector<std::complex<double>> dgrid(opt_.double_grid ? std::size_t(ng) * ng : 0);
  const Bands rows = wrapped(L.row_lo, L.row_hi, ng);
  const fftw::PrunedFft fft(buf.get(), ng, ng, FFTW_FORWARD, rows, wrapped(-N / 2 + 1, N / 2, ng), FFTW_MEASURE);
  st.fft_s = seconds_since(t_start);

  // Only the rows visibilities reach are written, and only they are transformed (the others are
  // never read): each plane clears and copies just those.
  auto each_row_cell = [&](auto&& f) {
    for (auto [a, b] : rows)
      tbb::parallel_for(std::size_t(a) * ng, std::size_t(b) * ng, [&](std::size_t i) { f(i); });
  };
  auto grid_plane = [&]<class T>(std::complex<T>* g, int p) {
    const int p_lo = std::max(0, p - W + 1);
    each_row_cell([&](std::size_t i) { g[i] = 0; });
    for (int pass = 0; pass < std::min(2, L.strips); ++pass) {
      tbb::parallel_for(0, (L.strips - pass + 1) / 2, [&](int h) {
        const int s = pass + 2 * h;
        for (int p0 = p_lo; p0 <= p; ++p0) {
          const std::size_t key = std::size_t(p0) * L.strips + s;
          for (std::size_t i = L.start[key]; i < L.start[key + 1]; ++i) {
            const double kw = es::psi((L.w[i] - pl.w0) / pl.dw - p, W, beta);
            add_visibility(g, ng, double(L.u[i]) * scale, double(L.v[i]) * scale, kw, cs[i], taps);
          }
        }
      });
    }
  };

  for (int p = 0; p < pl.count; ++p) {
    if (L.range(std::max(0, p - W + 1), std::min(p, pl.count - W)) > 0) {
      auto t0 = Clock::now();
      if (opt_.double_grid) {
        grid_plane(dgrid.data(), p);
        each_row_cell([&](std::size_t i) { buf[i] = cfloat(dgrid[i]); });
      } else {
        grid_plane(buf.get(), p);
      }
      auto t1 = Clock::now();
      st.grid_s += std::chrono::duration<double>(t1 - t0).count();
      fft.run();
      auto t2 = Clock::now();
      st.fft_s += std::chrono::duration<double>(t2 - t1).count();
      tbb::parallel_for(0, N, [&](int y) {
        const int Y = y - N / 2;
        const cfloat* row = buf.get() + std::size_t(wrap(Y, ng)) * ng;
        const std::complex<double>* ph = scr.phase.data() + std::size_t(std::abs(Y)) * scr.half;
        double* out = acc.data() + std::size_t(y) * N;
        for (int x = 0; x < N; ++x) {
          const int X = N / 2 - x;
          const cfloat f = row[X >= 0 ? X : X + ng];
          const std::complex<double> s = ph[std::abs(X)];
          out[x] += s.real() * f.real() - s.imag() * f.imag();
        }
      });
      st.screen_s += seconds_since(t2);
      ++st.planes;
    }
    scr.advance();
  }
  tbb::parallel_for(0, N, [&](int y) {
    const int Y = y - N / 2;
    const double cy = corr_uv(Y);
    for (int x = 0; x < N; ++x) {
      const int X = N / 2 - x;
      acc[std::size_t(y) * N + x] *= cy * corr_uv(X) * scr.corr[std::size_t(std::abs(Y)) * scr.half + std::abs(X)];
    }
  });
  st.updates = double(n) * W * W * W;
  if (stats) *stats = st;
  return acc;
}

void Engine::degrid(const float* image, const float* u, const float* v, const float* w, std::size_t n, cfloat* out,
                    Stats* stats) const {
  const int N = opt_.image_size, ng = ng_, W = kernel_.support;
  const double beta = kernel_.beta, scale = ng * opt_.cell_rad;
  const es::Taps taps(kernel_);
  if (n == 0) return;
  auto t_start = Clock::now();
  const auto [wlo, whi] = abs_w_range(w, n);
  const Planes pl = planes(wlo, whi);
  const Layout L = sort_visibilities(u, v, w, n, pl, W, ng, scale);
  Stats st;
  st.sort_s = seconds_since(t_start);
  t_start = Clock::now();
  Screens scr(*this, pl);
  // The image times every image-domain factor (the gridder applies them last, so here first).
  std::vector<double> J(std::size_t(N) * N);
  tbb::parallel_for(0, N, [&](int y) {
    const int Y = y - N / 2;
    for (int x = 0; x < N; ++x) {
      const int X = N / 2 - x;
      const std::size_t i = std::size_t(y) * N + x;
      J[i] = image[i] * corr_uv(Y) * corr_uv(X) * scr.corr[std::size_t(std::abs(Y)) * scr.half + std::abs(X)];
    }
  });
  std::vector<std::complex<double>> acc(n, 0.0);
  st.screen_s += seconds_since(t_start);

  t_start = Clock::now();
  auto buf = fftw::alloc(std::size_t(ng) * ng);
  const fftw::PrunedFft fft(buf.get(), ng, ng, FFTW_BACKWARD, wrapped(L.row_lo, L.row_hi, ng), wrapped(-N / 2 + 1, N / 2, ng),
                              FFTW_MEASURE);
  st.fft_s = seconds_since(t_start);
  for (int p = 0; p < pl.count; ++p) {
    const int p_lo = std::max(0, p - W + 1), p_hi = std::min(p, pl.count - W);
    if (p_lo <= p_hi && L.range(p_lo, p_hi) > 0) {
      auto t1 = Clock::now();
      // The image times the plane's conjugate screen, built straight into each chunk of columns
      // the transform takes (column q is X = q, or q - ng past N/2; pixel x = N/2 - X; row Y at
      // wrap(Y)); the rest of the grid is zeroed by the transform where it is read.
      fft.run([&](int c0, int nc, cfloat* values) {
        for (int c = 0; c < nc; ++c) std::fill(values + std::size_t(c) * ng, values + std::size_t(c + 1) * ng, cfloat(0));
        for (int y = 0; y < N; ++y) {
          const int Y = y - N / 2;
          const std::size_t r = std::size_t(wrap(Y, ng));
          const std::complex<double>* ph = scr.phase.data() + std::size_t(std::abs(Y)) * scr.half;
          const double* in = J.data() + std::size_t(y) * N;
          for (int c = 0; c < nc; ++c) {
            const int X = c0 + c <= N / 2 ? c0 + c : c0 + c - ng;
            values[std::size_t(c) * ng + r] = cfloat(in[N / 2 - X] * std::conj(ph[std::abs(X)]));
          }
        }
      });
      auto t2 = Clock::now();
      st.fft_s += std::chrono::duration<double>(t2 - t1).count();
      const std::size_t lo = L.start[std::size_t(p_lo) * L.strips], hi = L.start[std::size_t(p_hi + 1) * L.strips];
      tbb::parallel_for(lo, hi, [&](std::size_t i) {
        const double kw = es::psi((L.w[i] - pl.w0) / pl.dw - p, W, beta);
        acc[i] += kw * gather_visibility(buf.get(), ng, double(L.u[i]) * scale, double(L.v[i]) * scale, taps);
      });
      st.grid_s += seconds_since(t2);
      ++st.planes;
    }
    scr.advance();
  }
  tbb::parallel_for(std::size_t(0), n, [&](std::size_t i) {
    const std::complex<double> V = acc[i] * std::polar(1.0, 2 * kPi * double(L.w[i]) * pl.t0);
    out[L.order[i]] = cfloat(L.flipped[i] ? std::conj(V) : V);
  });
  st.updates = double(n) * W * W * W;
  if (stats) *stats = st;
}

double predicted_seconds(const Engine& e, double n, double min_abs_w, double max_abs_w, const EstimateContext& c,
                         double passes) {
  const double W = e.kernel().support, cells = double(e.grid_size()) * e.grid_size();
  const double planes = e.planes(min_abs_w, max_abs_w).count;
  const double pixels = double(e.options().image_size) * e.options().image_size;
  // VM, 2 cores, small preset (783,360 visibilities), epsilon 1e-4: at 2048^2 pixels W 6, 17 planes
  // of 4096^2: 0.03 s sorting, 0.43 s gridding, 0.91 s FFTs, 0.12 s screens; at 512^2 and padding
  // 1.5, 2, 2.5 (W 7, 6, 5): gridding 0.61, 0.41, 0.38 s (a cost per visibility and plane besides
  // the W^3 updates), FFTs 0.41, 0.27, 0.51 s for 14 to 16 planes of 768^2 to 1280^2 (FFTW's
  // planning, about 0.2 s, included). H100 (el56-82, 8192^2, epsilon 1e-4, padding 2): 85 ms FFTs
  // and transposes, 25 ms image sums, 50 ms of waits and allocation. H200, the same run: spreading
  // (fixed-point tiles, W 6) 3.0e11 to 3.3e11 updates/s from 31 M to 502 M visibilities (h100_wstack.md).
  const bool cuda = c.backend == "cuda";
  const double per_pass = seconds_at(c, planes * cells * std::log2(cells), 3.8e9, 3.9e12) +
                          seconds_at(c, planes * pixels, 3e8, 1.2e11) + (cuda ? 0.05 : 0.2);
  return seconds_at(c, n, 1.3e7, 2e9) + seconds_at(c, n, 1.43e6, 1e12) + seconds_at(c, n * W * W * W, 7e8, 3.3e11) +
         passes * per_pass;
}

namespace {

constexpr double kPaddings[] = {1.25, 1.5, 1.75, 2.0, 2.5, 3.0};

// The engine of each padding (null where the kernel cannot reach epsilon, with why), made in
// parallel: their kernels' searches are most of padding 0's cost, and each is kept per process.
struct Candidates {
  std::vector<std::optional<Engine>> engine;
  std::string why;
};
Candidates candidates(Options o) {
  Candidates c;
  c.engine.resize(std::size(kPaddings));
  std::vector<std::string> why(std::size(kPaddings));
  tbb::parallel_for(std::size_t(0), std::size(kPaddings), [&](std::size_t i) {
    Options mine = o;
    mine.padding = kPaddings[i];
    try {
      c.engine[i].emplace(mine);
    } catch (const std::invalid_argument& e) {
      why[i] = e.what();
    }
  });
  for (const std::string& w : why)
    if (!w.empty()) c.why = w;
  return c;
}

}  // namespace

void prepare_paddings(const Options& o) { candidates(o); }

Options cheapest_padding(Options o, double n, double min_abs_w, double max_abs_w, const EstimateContext& c,
                         double passes) {
  const Candidates all = candidates(o);
  std::optional<Options> best;
  double best_s = 0;
  for (const std::optional<Engine>& e : all.engine) {
    if (!e) continue;
    const double s = predicted_seconds(*e, n, min_abs_w, max_abs_w, c, passes);
    if (!best || s < best_s) best = e->options(), best_s = s;
  }
  if (!best) throw std::invalid_argument(all.why);
  return *best;
}

}  // namespace uvflow::wstack
