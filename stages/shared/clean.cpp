#include "stages/shared/clean.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <cmath>
#include <numbers>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/shared/fftw.hpp"
#include "stages/shared/fits_image.hpp"

namespace uvflow::clean {
namespace {

// FWHM = kFwhm * sigma.
const double kFwhm = 2.0 * std::sqrt(2.0 * std::numbers::ln2);

std::string box_text(const Box& b) {
  return "[" + std::to_string(b.x0) + ", " + std::to_string(b.y0) + ", " + std::to_string(b.x1) + ", " +
         std::to_string(b.y1) + "]";
}

// The PSF's centre pixel value, which must be positive: components are scaled by it.
double psf_centre(const Image& psf, const std::string& where) {
  if (!psf.consistent()) throw InputError(where + ": the PSF has inconsistent size");
  return require_positive_centre(psf.pixels[std::size_t(psf.ny / 2) * std::size_t(psf.nx) + std::size_t(psf.nx / 2)],
                                 psf, where);
}

// Solves the symmetric 3 x 3 system m x = r (Cramer); false when it is singular.
bool solve3(const std::array<double, 9>& m, const std::array<double, 3>& r, std::array<double, 3>& x) {
  auto det = [](const std::array<double, 9>& a) {
    return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) + a[2] * (a[3] * a[7] - a[4] * a[6]);
  };
  const double d = det(m);
  if (!(std::abs(d) > 0) || !std::isfinite(d)) return false;
  for (int k = 0; k < 3; ++k) {
    auto mk = m;
    for (int i = 0; i < 3; ++i) mk[std::size_t(3 * i + k)] = r[std::size_t(i)];
    x[std::size_t(k)] = det(mk) / d;
  }
  return true;
}

bool is_ellipse(const Gaussian& g) {
  return g.a > 0 && g.c > 0 && g.a * g.c - g.b * g.b > 0 && std::isfinite(g.a + g.b + g.c);
}

// Levenberg-Marquardt on sum over `pixels` of (at(x, y) - exp(-(a x^2 + 2 b xy + c y^2)))^2, x and y
// from (cx, cy), from `g`.
Gaussian refine_fit(const std::vector<std::pair<int, int>>& pixels, const std::function<double(int, int)>& at, int cx,
                    int cy, Gaussian g) {
  auto cost = [&](const Gaussian& h) {
    double s = 0;
    for (auto [ix, iy] : pixels) {
      const double x = ix - cx, y = iy - cy;
      const double e = at(ix, iy) - std::exp(-(h.a * x * x + 2 * h.b * x * y + h.c * y * y));
      s += e * e;
    }
    return s;
  };
  double lambda = 1e-3, c0 = cost(g);
  for (int it = 0; it < 100; ++it) {
    std::array<double, 9> jj{};
    std::array<double, 3> jr{};
    for (auto [ix, iy] : pixels) {
      const double x = ix - cx, y = iy - cy;
      const double model = std::exp(-(g.a * x * x + 2 * g.b * x * y + g.c * y * y));
      const std::array<double, 3> d{-x * x * model, -2 * x * y * model, -y * y * model};
      const double e = at(ix, iy) - model;
      for (int i = 0; i < 3; ++i) {
        jr[std::size_t(i)] += d[std::size_t(i)] * e;
        for (int j = 0; j < 3; ++j) jj[std::size_t(3 * i + j)] += d[std::size_t(i)] * d[std::size_t(j)];
      }
    }
    bool improved = false;
    while (lambda < 1e12) {
      auto damped = jj;
      for (int i = 0; i < 3; ++i) damped[std::size_t(4 * i)] *= 1 + lambda;
      std::array<double, 3> step{};
      Gaussian trial = g;
      if (solve3(damped, jr, step)) trial = {g.a + step[0], g.b + step[1], g.c + step[2]};
      const double c1 = is_ellipse(trial) ? cost(trial) : INFINITY;
      if (c1 < c0) {
        improved = c0 - c1 > 1e-14 * c0;
        g = trial;
        c0 = c1;
        lambda = std::max(lambda / 10, 1e-12);
        break;
      }
      lambda *= 10;
    }
    if (!improved) break;
  }
  return g;
}

// The FWHM of g's major axis, in pixels.
double major_fwhm_px(const Gaussian& g) {
  return kFwhm / std::sqrt(2 * ((g.a + g.c) / 2 - std::hypot((g.a - g.c) / 2, g.b)));
}

}  // namespace

double require_positive_centre(float centre, const Image& psf, const std::string& where) {
  const double p0 = centre;
  if (!(p0 > 0) || !std::isfinite(p0))
    throw InputError(where + ": the PSF's centre pixel (" + std::to_string(psf.nx / 2) + ", " +
                     std::to_string(psf.ny / 2) + ") is " + std::to_string(p0) + ", not positive");
  return p0;
}

std::vector<Box> boxes_of(const std::vector<Record>& records, const std::string& param) {
  std::vector<Box> out;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    auto get = [&](const char* k) { return std::int64_t(std::llround(r.at(k))); };
    Box b{get("x0"), get("y0"), get("x1"), get("y1")};
    if (b.x1 < b.x0 || b.y1 < b.y0)
      throw ParamError(param, "box " + std::to_string(i + 1) + " " + box_text(b) + " is empty: need x0 <= x1 and y0 <= y1");
    out.push_back(b);
  }
  return out;
}

std::vector<std::uint8_t> make_mask(int nx, int ny, const std::string& file, const std::vector<Box>& boxes) {
  const std::size_t n = std::size_t(nx) * std::size_t(ny);
  if (file.empty() && boxes.empty()) return std::vector<std::uint8_t>(n, 1);
  std::vector<std::uint8_t> mask(n, 0);
  if (!file.empty()) {
    fits::ImageFile f(file, 0);
    f.require_planes();
    if (f.nx() != nx || f.ny() != ny)
      throw InputError("mask " + f.where() + " is " + std::to_string(f.nx()) + " x " + std::to_string(f.ny()) +
                       " pixels; the image is " + std::to_string(nx) + " x " + std::to_string(ny));
    std::vector<float> plane(n);
    f.read_plane(0, plane.data());
    for (std::size_t k = 0; k < n; ++k) mask[k] = plane[k] != 0 && !std::isnan(plane[k]);
  }
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const Box& b = boxes[i];
    if (b.x0 < 0 || b.y0 < 0 || b.x1 >= nx || b.y1 >= ny)
      throw InputError("mask box " + std::to_string(i + 1) + " " + box_text(b) + " leaves the " + std::to_string(nx) +
                       " x " + std::to_string(ny) + " image (pixels 0.." + std::to_string(nx - 1) + ", 0.." +
                       std::to_string(ny - 1) + ")");
    for (std::int64_t y = b.y0; y <= b.y1; ++y)
      for (std::int64_t x = b.x0; x <= b.x1; ++x) mask[std::size_t(y) * std::size_t(nx) + std::size_t(x)] = 1;
  }
  return mask;
}

MinorCycle hogbom(float* residual, float* model, int nx, int ny, const Image& psf, const std::vector<std::uint8_t>& mask,
                  double gain, std::int64_t niter, double threshold, const std::string& where,
                  const std::function<bool()>& cancelled) {
  const double p0 = psf_centre(psf, where);
  const int pcx = psf.nx / 2, pcy = psf.ny / 2;
  const float* p = psf.pixels.data();
  struct Peak {
    float abs = -1;
    std::size_t at = 0;
  };
  auto better = [](const Peak& a, const Peak& b) { return a.abs > b.abs || (a.abs == b.abs && a.at < b.at) ? a : b; };
  auto find_peak = [&] {
    return tbb::parallel_reduce(
        tbb::blocked_range<int>(0, ny, 16), Peak{},
        [&](const tbb::blocked_range<int>& rows, Peak best) {
          for (int y = rows.begin(); y < rows.end(); ++y)
            for (std::size_t k = std::size_t(y) * std::size_t(nx), e = k + std::size_t(nx); k < e; ++k)
              if (mask[k] && std::abs(residual[k]) > best.abs) best = {std::abs(residual[k]), k};
          return best;
        },
        better);
  };
  MinorCycle out;
  double cleaned = 0;
  out.stop = "niter";
  for (;;) {
    const Peak pk = find_peak();
    if (minor_cycle_done(out, pk.abs, threshold, niter, cancelled)) break;
    const int x = int(pk.at % std::size_t(nx)), y = int(pk.at / std::size_t(nx));
    const double peak = residual[pk.at];
    const float flux = float(gain * peak / p0);
    model[pk.at] += flux;
    cleaned += flux;
    out.components.push_back({x, y, flux, peak, cleaned});
    // Image pixel (ix, iy) meets PSF pixel (ix - x + pcx, iy - y + pcy).
    const int x_lo = std::max(0, x - pcx), x_hi = std::min(nx, x - pcx + psf.nx);
    const int y_lo = std::max(0, y - pcy), y_hi = std::min(ny, y - pcy + psf.ny);
    tbb::parallel_for(tbb::blocked_range<int>(y_lo, y_hi, 16), [&](const tbb::blocked_range<int>& rows) {
      for (int iy = rows.begin(); iy < rows.end(); ++iy) {
        float* r = residual + std::size_t(iy) * std::size_t(nx);
        const float* q = p + std::size_t(iy - y + pcy) * std::size_t(psf.nx) + std::size_t(pcx - x);
        // One rounding (fma), as the cuda backend subtracts: the same residuals on both.
        for (int ix = x_lo; ix < x_hi; ++ix) r[ix] = std::fma(-flux, q[ix], r[ix]);
      }
    });
  }
  return out;
}

const std::vector<std::uint8_t>& MaskSource::get(int nx, int ny) {
  if (mask_.empty() || nx_ != nx || ny_ != ny) {
    mask_ = make_mask(nx, ny, file_, boxes_);
    nx_ = nx;
    ny_ = ny;
  }
  return mask_;
}

std::vector<float> psf_patch_of(const Image& psf, int psf_patch) {
  const int w = 2 * psf_patch + 1;
  std::vector<float> patch(std::size_t(w) * std::size_t(w), 0.0f);
  for (int dy = -psf_patch; dy <= psf_patch; ++dy)
    for (int dx = -psf_patch; dx <= psf_patch; ++dx) {
      const int x = dx + psf.nx / 2, y = dy + psf.ny / 2;
      if (x >= 0 && y >= 0 && x < psf.nx && y < psf.ny)
        patch[std::size_t(dy + psf_patch) * std::size_t(w) + std::size_t(dx + psf_patch)] =
            psf.pixels[std::size_t(y) * std::size_t(psf.nx) + std::size_t(x)];
    }
  return patch;
}

void clark_cycle(const float* residual, const std::vector<std::uint8_t>& mask, int nx, double limit, double sidelobe,
                 double gain, double p0, std::int64_t niter, const std::vector<float>& patch, int psf_patch, MinorCycle& out,
                 double& cleaned, std::vector<std::size_t>& at, std::vector<float>& fluxes) {
  std::vector<std::size_t> active;
  std::vector<float> value;
  for (std::size_t k = 0; k < mask.size(); ++k)
    if (mask[k] && std::abs(residual[k]) > limit) {
      active.push_back(k);
      value.push_back(residual[k]);
    }
  clark_patch_cycle(active, value, nx, limit, sidelobe, gain, p0, niter, patch, psf_patch, out, cleaned, at, fluxes);
}

void clark_patch_cycle(const std::vector<std::size_t>& active, std::vector<float>& value, int nx, double limit,
                       double sidelobe, double gain, double p0, std::int64_t niter, const std::vector<float>& patch,
                       int psf_patch, MinorCycle& out, double& cleaned, std::vector<std::size_t>& at,
                       std::vector<float>& fluxes) {
  const std::size_t w = std::size_t(2 * psf_patch + 1);
  at.clear();
  fluxes.clear();
  // The values the patch leaves out differ from the true residual by up to sidelobe p0 times the sum of
  // this cycle's |fluxes|. While that is below half the limit, every component (at a value above the
  // limit) lowers the residual's energy for the whole PSF, so the cycles converge; past it a truncated,
  // not positive-definite patch can make the cycle grow instead (an elongated main lobe cut by the patch).
  // A quarter: at a half, 2 of 40 random test skies got flux spread onto a source's neighbours.
  const double budget = 0.25 * limit;
  double drift = 0;
  // A tournament tree over the pixels' |values| (leaves in `active`'s order; of equal ones the
  // earlier wins, as a scan with > finds the peak). A component's patch is walked in the ascending
  // `active`, row by row, jumping by binary search over pixels outside it; the tree is then renewed
  // once, level by level, over the runs it changed. A component costs the pixels it changes plus a
  // search per row that has them, not two scans of them all (a large image's late cycles select 1e5
  // pixels, hundreds of times).
  const std::size_t m = value.size();
  constexpr std::uint32_t kNone = UINT32_MAX;
  std::size_t leaves = 1;
  while (leaves < m) leaves *= 2;
  std::vector<std::uint32_t> tree(2 * leaves, kNone);
  auto winner = [&](std::uint32_t a, std::uint32_t b) {
    if (a == kNone || b == kNone) return a == kNone ? b : a;
    return std::abs(value[b]) > std::abs(value[a]) ? b : a;
  };
  for (std::size_t i = 0; i < m; ++i) tree[leaves + i] = std::uint32_t(i);
  for (std::size_t t = leaves - 1; t >= 1; --t) tree[t] = winner(tree[2 * t], tree[2 * t + 1]);
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // tree nodes [first, last] changed, ascending
  while (m > 0 && std::int64_t(out.components.size()) < niter && drift <= budget) {
    const std::size_t best = tree[1];
    if (!(std::abs(value[best]) > limit)) break;
    const int x = int(active[best] % std::size_t(nx)), y = int(active[best] / std::size_t(nx));
    const float flux = float(gain * value[best] / p0);
    drift += sidelobe * p0 * std::abs(double(flux));
    cleaned += flux;
    out.components.push_back({x, y, flux, value[best], cleaned});
    at.push_back(active[best]);
    fluxes.push_back(flux);
    // Row r of the patch spans pixels [row_first(r), row_last(r)].
    const std::size_t x0 = std::size_t(std::max(0, x - psf_patch)), x1 = std::size_t(std::min(nx - 1, x + psf_patch));
    auto row_first = [&](std::size_t r) { return r * std::size_t(nx) + x0; };
    auto row_last = [&](std::size_t r) { return r * std::size_t(nx) + x1; };
    const std::size_t last_pixel = row_last(std::size_t(y + psf_patch));
    runs.clear();
    auto it = std::lower_bound(active.begin(), active.end(), row_first(std::size_t(std::max(0, y - psf_patch))));
    while (it != active.end() && *it <= last_pixel) {
      const std::size_t r = *it / std::size_t(nx);
      if (*it < row_first(r)) {  // left of the patch: on to its start in this row
        it = std::lower_bound(it, active.end(), row_first(r));
        continue;
      }
      if (*it > row_last(r)) {  // right of it: on to the next row's start
        it = std::lower_bound(it, active.end(), row_first(r + 1));
        continue;
      }
      const std::size_t first = std::size_t(it - active.begin());
      // Pixel (px, r) takes the patch's (px - x + psf_patch, r - y + psf_patch).
      const std::size_t patch_row = std::size_t(int(r) - y + psf_patch) * w - std::size_t(x - psf_patch);
      for (; it != active.end() && *it <= row_last(r); ++it) {
        float& v = value[std::size_t(it - active.begin())];
        v = std::fma(-flux, patch[patch_row + (*it - r * std::size_t(nx))], v);  // one rounding: the same on every compiler
      }
      runs.emplace_back(leaves + first, leaves + std::size_t(it - active.begin()) - 1);
    }
    // The runs' ancestors, level by level, runs that meet merged.
    for (std::size_t level = leaves; level > 1 && !runs.empty(); level /= 2) {
      std::size_t kept = 0;
      for (auto [lo, hi] : runs) {
        lo /= 2, hi /= 2;
        if (kept > 0 && lo <= runs[kept - 1].second) runs[kept - 1].second = std::max(runs[kept - 1].second, hi);
        else runs[kept++] = {lo, hi};
      }
      runs.resize(kept);
      for (auto [lo, hi] : runs)
        for (std::size_t t = lo; t <= hi; ++t) tree[t] = winner(tree[2 * t], tree[2 * t + 1]);
    }
  }
}

MinorCycle clark(float* residual, float* model, int nx, int ny, const Image& psf, const std::vector<std::uint8_t>& mask,
                 double gain, std::int64_t niter, double threshold, int psf_patch, double cycle_factor,
                 const std::string& where, const std::function<bool()>& cancelled) {
  const double p0 = psf_centre(psf, where);
  const int pnx = psf.nx, pny = psf.ny, pcx = pnx / 2, pcy = pny / 2;
  auto psf_at = [&](int dx, int dy) {  // the PSF at offset (dx, dy) from its centre; 0 beyond it
    const int x = dx + pcx, y = dy + pcy;
    return x < 0 || y < 0 || x >= pnx || y >= pny ? 0.0f : psf.pixels[std::size_t(y) * std::size_t(pnx) + std::size_t(x)];
  };
  // The largest sidelobe outside the patch bounds what a patch-only cycle may leave wrong.
  double sidelobe = 0;
  for (int y = 0; y < pny; ++y)
    for (int x = 0; x < pnx; ++x)
      if (std::abs(x - pcx) > psf_patch || std::abs(y - pcy) > psf_patch)
        sidelobe = std::max(sidelobe, std::abs(double(psf.pixels[std::size_t(y) * std::size_t(pnx) + std::size_t(x)])) / p0);
  if (sidelobe >= 1)
    throw InputError(where + ": the PSF reaches " + std::to_string(sidelobe) + " of its centre outside the " +
                     std::to_string(2 * psf_patch + 1) + "-pixel patch: give a larger psf_patch");

  // The whole PSF as a circular kernel of 2nx x 2ny: every offset between two image pixels has its own
  // element, so the FFT convolution is exact (no wrap-around), the same as shifting the PSF image.
  const int mx = 2 * nx, my = 2 * ny;
  const std::size_t m = std::size_t(mx) * std::size_t(my);
  fftw::Buffer kernel = fftw::alloc(m), work = fftw::alloc(m);
  for (int y = 0; y < my; ++y)
    for (int x = 0; x < mx; ++x) {
      const int dx = x < nx ? x : x - mx, dy = y < ny ? y : y - my;
      kernel[std::size_t(y) * std::size_t(mx) + std::size_t(x)] = psf_at(dx, dy);
    }
  // The components lie in the first ny rows and nx columns of `work`, and only those of the result
  // are read: the forward transform takes those rows, the backward one makes only those rows.
  // Measured plans: every cycle runs both.
  const fftw::Bands all_rows{{0, my}}, all_cols{{0, mx}}, image_rows{{0, ny}};
  fftw::PrunedFft(kernel.get(), mx, my, FFTW_FORWARD, all_rows, all_cols, FFTW_ESTIMATE).run();
  const fftw::PrunedFft fwd(work.get(), mx, my, FFTW_FORWARD, image_rows, all_cols, FFTW_MEASURE);
  const fftw::PrunedFft bwd(work.get(), mx, my, FFTW_BACKWARD, image_rows, all_cols, FFTW_MEASURE);

  const std::vector<float> patch = psf_patch_of(psf, psf_patch);
  MinorCycle out;
  out.stop = "niter";
  double cleaned = 0;
  std::vector<std::size_t> at;
  std::vector<float> fluxes;
  for (;;) {
    float peak = -1;
    for (std::size_t k = 0, n = std::size_t(nx) * std::size_t(ny); k < n; ++k)
      if (mask[k]) peak = std::max(peak, std::abs(residual[k]));
    if (minor_cycle_done(out, peak, threshold, niter, cancelled)) break;
    // The cycle: Hogbom with the patch on the pixels above the limit.
    const double limit = clark_limit(threshold, cycle_factor, sidelobe, peak);
    clark_cycle(residual, mask, nx, limit, sidelobe, gain, p0, niter, patch, psf_patch, out, cleaned, at, fluxes);
    std::fill(work.get(), work.get() + std::size_t(ny) * std::size_t(mx), cfloat(0, 0));  // the rows read
    for (std::size_t i = 0; i < at.size(); ++i) {
      model[at[i]] += fluxes[i];
      work[(at[i] / std::size_t(nx)) * std::size_t(mx) + at[i] % std::size_t(nx)] += fluxes[i];
    }
    // The cycle's components, convolved with the whole PSF, off the whole residual.
    fwd.run();
    tbb::parallel_for(std::size_t(0), m, std::size_t(1) << 14, [&](std::size_t k0) {
      for (std::size_t k = k0, e = std::min(m, k0 + (std::size_t(1) << 14)); k < e; ++k) work[k] *= kernel[k];
    });
    bwd.run();
    const float scale = 1.0f / float(m);
    tbb::parallel_for(0, ny, [&](int y) {
      for (int x = 0; x < nx; ++x)
        residual[std::size_t(y) * std::size_t(nx) + std::size_t(x)] -=
            work[std::size_t(y) * std::size_t(mx) + std::size_t(x)].real() * scale;
    });
  }
  return out;
}

double robust_rms(const float* pixels, const std::vector<std::uint8_t>& mask) {
  std::vector<float> v;
  for (std::size_t k = 0; k < mask.size(); ++k)
    if (mask[k] && std::isfinite(pixels[k])) v.push_back(pixels[k]);
  if (v.empty()) return 0;
  auto median = [](std::vector<float>& x) {
    auto mid = x.begin() + std::ptrdiff_t(x.size() / 2);
    std::nth_element(x.begin(), mid, x.end());
    return double(*mid);
  };
  const double m = median(v);
  for (auto& x : v) x = float(std::abs(x - m));
  return 1.4826 * median(v);
}

Limits minor_cycle_limits(double threshold, std::int64_t niter, double peak_start, double noise, const CycleControl* control) {
  Limits l{threshold, niter, "threshold"};
  if (!control) return l;
  auto raise = [&](double t, const char* by) {
    if (t > l.threshold) l.threshold = t, l.threshold_by = by;
  };
  raise(control->threshold_jy, "loop threshold");
  raise(control->threshold_sigma * noise, "threshold_sigma");
  raise((1 - control->major_gain) * peak_start, "major_gain");
  if (control->minor_iterations_left >= 0) l.niter = std::min(l.niter, control->minor_iterations_left);
  return l;
}

void check_cycle_inputs(const std::string& type, const Image& dirty, const Image* start_model) {
  if (!dirty.consistent()) throw InputError(type + ": the dirty image has inconsistent size");
  if (start_model && (!start_model->consistent() || start_model->nx != dirty.nx || start_model->ny != dirty.ny))
    throw InputError(type + ": the model so far is " + std::to_string(start_model->nx) + " x " +
                     std::to_string(start_model->ny) + " pixels; the dirty image is " + std::to_string(dirty.nx) + " x " +
                     std::to_string(dirty.ny));
}

Limits begin_minor_cycle(const float* dirty, const std::vector<std::uint8_t>& mask, double threshold, std::int64_t niter,
                         const CycleControl* control, CycleFigures& f) {
  for (std::size_t k = 0; k < mask.size(); ++k)
    if (mask[k]) f.peak_start = std::max(f.peak_start, double(std::abs(dirty[k])));
  f.noise = robust_rms(dirty, mask);
  return minor_cycle_limits(threshold, niter, f.peak_start, f.noise, control);
}

double model_flux(const float* model, std::size_t n) {
  double s = 0;
  for (std::size_t k = 0; k < n; ++k) s += model[k];
  return s;
}

void end_minor_cycle(Context& ctx, const std::string& type, const Limits& limits, const MinorCycle& cycle, double flux_in_model,
                     const std::string& components_file, CycleFigures& f) {
  const double cleaned = cycle.components.empty() ? 0.0 : cycle.components.back().cleaned;
  f.peak = cycle.peak_residual;
  f.flux = cleaned;
  f.model_flux = flux_in_model;
  f.iterations = std::int64_t(cycle.components.size());
  f.stop = cycle.stop == "threshold" ? limits.threshold_by : cycle.stop;
  spdlog::info("{}: {} components, {:.6g} Jy cleaned, peak residual {:.6g} Jy/beam (stopped by {} {:.6g})", ctx.stage_id(),
               cycle.components.size(), cleaned, cycle.peak_residual, f.stop,
               cycle.stop == "threshold" ? limits.threshold : double(limits.niter));
  if (!cycle.detail.empty()) spdlog::debug("{}: {}", ctx.stage_id(), cycle.detail);
  if (components_file.empty()) return;
  std::ofstream file(ctx.output_file(components_file));
  file << "# " << type << " components: iteration x y flux_jy peak_residual_jy cleaned_jy (stopped by " << cycle.stop
       << ", final peak residual " << cycle.peak_residual << ")\n";
  char line[160];
  for (std::size_t i = 0; i < cycle.components.size(); ++i) {
    const Component& c = cycle.components[i];
    std::snprintf(line, sizeof line, "%zu %d %d %.9g %.9g %.9g\n", i + 1, c.x, c.y, c.flux, c.peak_residual, c.cleaned);
    file << line;
  }
  file.close();
  if (!file) throw std::runtime_error("cannot write " + components_file);
}

std::optional<CleanedImages> run_minor_cycle(
    Context& ctx, const std::string& type, const Image& dirty, const Image* start_model, const CycleControl* control,
    double threshold, std::int64_t niter, MaskSource& mask_source, const std::string& components_file,
    const std::function<MinorCycle(float* residual, float* model, const std::vector<std::uint8_t>& mask, const Limits&)>& run) {
  check_cycle_inputs(type, dirty, start_model);
  const std::size_t n = dirty.pixels.size();
  CleanedImages out{std::make_shared<Image>(dirty), std::make_shared<Image>(dirty), std::make_shared<CycleFigures>()};
  out.residual->pixels = Array<float>::host(n);
  std::copy(dirty.pixels.begin(), dirty.pixels.end(), out.residual->pixels.begin());
  out.model->pixels = Array<float>::host(n);
  if (start_model) std::copy(start_model->pixels.begin(), start_model->pixels.end(), out.model->pixels.begin());
  else std::fill(out.model->pixels.begin(), out.model->pixels.end(), 0.0f);
  if (out.model->wcs) out.model->wcs->bunit = "JY/PIXEL";
  const std::vector<std::uint8_t>& mask = mask_source.get(dirty.nx, dirty.ny);
  const Limits limits = begin_minor_cycle(dirty.pixels.data(), mask, threshold, niter, control, *out.figures);
  const MinorCycle cycle = run(out.residual->pixels.data(), out.model->pixels.data(), mask, limits);
  if (cycle.stop == "cancelled") return std::nullopt;
  end_minor_cycle(ctx, type, limits, cycle, model_flux(out.model->pixels.data(), n), components_file, *out.figures);
  return out;
}

Gaussian fit_main_lobe(const Image& psf, double threshold, const std::string& where) {
  const double p0 = psf_centre(psf, where);
  const int nx = psf.nx, ny = psf.ny, cx = nx / 2, cy = ny / 2;
  auto at = [&](int x, int y) { return double(psf.pixels[std::size_t(y) * std::size_t(nx) + std::size_t(x)]) / p0; };
  // The main lobe: a flood fill from the centre over pixels >= threshold, plus the centre's 3 x 3.
  std::vector<std::uint8_t> in(std::size_t(nx) * std::size_t(ny), 0);
  std::vector<std::pair<int, int>> lobe, todo{{cx, cy}};
  auto take = [&](int x, int y) {
    if (x < 0 || y < 0 || x >= nx || y >= ny) return false;
    auto& f = in[std::size_t(y) * std::size_t(nx) + std::size_t(x)];
    if (f) return false;
    f = 1;
    lobe.emplace_back(x, y);
    return true;
  };
  while (!todo.empty()) {
    auto [x, y] = todo.back();
    todo.pop_back();
    if (x < 0 || y < 0 || x >= nx || y >= ny || at(x, y) < threshold || !take(x, y)) continue;
    todo.insert(todo.end(), {{x + 1, y}, {x - 1, y}, {x, y + 1}, {x, y - 1}});
  }
  for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx) take(cx + dx, cy + dy);

  // A start from the weighted linear fit of -ln(psf) = a x^2 + 2 b xy + c y^2 (positive pixels;
  // weights psf^2 make it close to the least squares on psf itself).
  std::array<double, 9> m{};
  std::array<double, 3> r{}, q{};
  for (auto [ix, iy] : lobe) {
    const double x = ix - cx, y = iy - cy, v = at(ix, iy);
    if (!(v > 0) || (x == 0 && y == 0)) continue;
    const std::array<double, 3> d{x * x, 2 * x * y, y * y};
    const double w = v * v, t = -std::log(v);
    for (int i = 0; i < 3; ++i) {
      r[std::size_t(i)] += w * d[std::size_t(i)] * t;
      for (int j = 0; j < 3; ++j) m[std::size_t(3 * i + j)] += w * d[std::size_t(i)] * d[std::size_t(j)];
    }
  }
  Gaussian g;
  if (!solve3(m, r, q) || !is_ellipse(g = {q[0], q[1], q[2]}))
    throw InputError(where + ": the PSF's main lobe (" + std::to_string(lobe.size()) +
                     " pixels) is not an elliptical peak: cannot fit a restoring beam");

  return refine_fit(lobe, at, cx, cy, g);
}

Gaussian fit_wsclean(const Image& psf, double threshold, double box_beams, const std::string& where) {
  const Gaussian start = fit_main_lobe(psf, threshold, where);
  const double p0 = psf_centre(psf, where);
  const int nx = psf.nx, ny = psf.ny, cx = nx / 2, cy = ny / 2;
  auto at = [&](int x, int y) { return double(psf.pixels[std::size_t(y) * std::size_t(nx) + std::size_t(x)]) / p0; };
  // WSClean's box: even, box_beams times the beam across, centred on the centre pixel, grown (at most
  // 5 fits) while the fitted major axis reaches 0.8 of it; WSClean starts from its theoretical beam,
  // this from the main lobe's fit (the fit hardly depends on the box: the same to 1e-4 from 30 to 60
  // pixels on the 4-pixel beam of tests/wsclean_clean_test.cpp).
  Gaussian g = start;
  for (int fit = 0; fit < 5; ++fit) {
    int box = int(std::ceil(box_beams * major_fwhm_px(g)));
    box = std::min({box + box % 2, nx - nx % 2, ny - ny % 2});
    // Only the quadrant x >= 0, y >= 0 of the box: WSClean (3.1, and schaapcommon's GaussianFitter
    // since) computes the model's offsets as size_t(xi) - int(x_mid), which wraps to ~1.8e19 left of
    // and below the centre, where its model is then 0 whatever the parameters, so those pixels do
    // not constrain its fit.
    std::vector<std::pair<int, int>> quadrant;
    for (int y = cy; y < std::min(ny, cy + box / 2); ++y)
      for (int x = cx; x < std::min(nx, cx + box / 2); ++x) quadrant.emplace_back(x, y);
    g = refine_fit(quadrant, at, cx, cy, start);
    if (0.8 * box_beams * major_fwhm_px(g) < box || box >= std::min(nx, ny) - 1) break;
  }
  return g;
}

Beam to_beam(const Gaussian& g, double cell_rad) {
  const double mean = (g.a + g.c) / 2, half = std::hypot((g.a - g.c) / 2, g.b);
  const double lmin = mean - half, lmax = mean + half;  // the major axis has the smaller curvature
  const double px_deg = cell_rad * kRadToDeg;
  // exp(-lambda u^2) = exp(-u^2 / (2 sigma^2)).
  auto fwhm = [&](double l) { return kFwhm / std::sqrt(2 * l) * px_deg; };
  // The minor axis lies at 0.5 atan2(2b, a - c) from +x; the major axis 90 degrees further, which
  // measured from north (+y) towards east (-x) is that same angle.
  double pa = half > 0 ? 0.5 * std::atan2(2 * g.b, g.a - g.c) * kRadToDeg : 0.0;
  if (pa <= -90) pa += 180;
  return {fwhm(lmin), fwhm(lmax), pa};
}

Gaussian from_beam(const Beam& b, double cell_rad) {
  const double px_deg = cell_rad * kRadToDeg;
  const double smaj = b.bmaj_deg / px_deg / kFwhm, smin = b.bmin_deg / px_deg / kFwhm;
  const double pa = b.bpa_deg / kRadToDeg;
  const double ex = -std::sin(pa), ey = std::cos(pa);  // major axis; the minor is (ey, -ex)
  const double lmaj = 1 / (2 * smaj * smaj), lmin = 1 / (2 * smin * smin);
  return {lmaj * ex * ex + lmin * ey * ey, (lmaj - lmin) * ex * ey, lmaj * ey * ey + lmin * ex * ex};
}

void restore(const float* model, const float* residual, float* restored, int nx, int ny, const Gaussian& g) {
  struct Comp {
    int x, y;
    float flux;
  };
  // The components in pixel order (each row's found in parallel: a large model is mostly zeros).
  std::vector<std::vector<Comp>> in_row(static_cast<std::size_t>(ny));
  tbb::parallel_for(0, ny, [&](int y) {
    for (int x = 0; x < nx; ++x)
      if (float f = model[std::size_t(y) * std::size_t(nx) + std::size_t(x)]; f != 0) in_row[std::size_t(y)].push_back({x, y, f});
  });
  std::vector<Comp> comps;
  std::vector<std::size_t> row_start(std::size_t(ny) + 1, 0);  // comps of rows [a, b): [row_start[a], row_start[b])
  for (int y = 0; y < ny; ++y) {
    comps.insert(comps.end(), in_row[std::size_t(y)].begin(), in_row[std::size_t(y)].end());
    row_start[std::size_t(y) + 1] = comps.size();
  }
  // Out to where the Gaussian falls below 1e-7 of its peak along its major axis.
  const double lmin = (g.a + g.c) / 2 - std::hypot((g.a - g.c) / 2, g.b);
  const int reach = int(std::ceil(std::sqrt(std::log(1e7) / lmin)));
  tbb::parallel_for(tbb::blocked_range<int>(0, ny, 8), [&](const tbb::blocked_range<int>& rows) {
    for (int y = rows.begin(); y < rows.end(); ++y) {
      float* out = restored + std::size_t(y) * std::size_t(nx);
      const float* res = residual + std::size_t(y) * std::size_t(nx);
      std::vector<double> row(std::size_t(nx), 0.0);
      // The components within reach of this row, in pixel order.
      const std::size_t first = row_start[std::size_t(std::max(0, y - reach))];
      const std::size_t last = row_start[std::size_t(std::min(ny, y + reach + 1))];
      for (std::size_t i = first; i < last; ++i) {
        const Comp& c = comps[i];
        const double dy = y - c.y;
        for (int x = std::max(0, c.x - reach), e = std::min(nx, c.x + reach + 1); x < e; ++x) {
          const double dx = x - c.x;
          row[std::size_t(x)] += c.flux * std::exp(-(g.a * dx * dx + 2 * g.b * dx * dy + g.c * dy * dy));
        }
      }
      for (int x = 0; x < nx; ++x) out[x] = float(row[std::size_t(x)] + res[x]);
    }
  });
}

}  // namespace uvflow::clean
