#include "stages/kernels/wproj.hpp"

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/units.hpp"
#include "runtime/payloads/kernel_stack_builder.hpp"
#include "stages/shared/chebyshev.hpp"
#include "stages/shared/spheroidal.hpp"
#include "stages/shared/fftw.hpp"

namespace uvflow {
namespace {

using kernels_wproj::kMaxPlanes;
// Bump when the stack's definition or the file layout changes: old cache files are then ignored.
constexpr std::uint32_t kCacheVersion = 2;  // 2: truncated_planes after the supports
constexpr char kCacheMagic[8] = {'U', 'V', 'F', 'W', 'P', 'R', 'O', 'J'};
// FFTW_MEASURE plans (serial) cost about 50 single-threaded plane transforms and make each about
// 1.6x faster (conv_size 2000 on 16 cores: 0.4-0.8 s of planning, 2.6 -> 1.6 ms per plane): worth it
// from this many planes per thread on. Wisdom saved in the cache directory makes later plans free.
constexpr int kMeasurePlanesPerThread = 50;

bool is_5_smooth(std::int64_t n) {
  for (int f : {2, 3, 5})
    while (n % f == 0) n /= f;
  return n == 1;
}

// ------------------------------------------------------------------ error models (epsilon)
//
// Both are in terms of the largest phase error phi a visibility can carry at the image's corners,
// fitted to measured peak errors with a margin of about 2 (against a direct DFT in
// tests/wproj_epsilon_test.cpp, docs/prediction.md; against WSClean's wgridder in
// bench/results/wproj_wide_field.md). They choose w_planes and oversample both for epsilon and,
// at kAutoEpsilon, when those are left 0.
//
// w-planes: a visibility at w is gridded with plane k = round(sqrt(|w| w_scale)), at k^2 / w_scale,
// at most half the gap to the next plane away: delta_w <= (sqrt(|w| w_scale) + 1/2) / w_scale. The
// screen it misses, exp(2 pi i delta_w (n - 1)), is a phase error of at most
// phi_w = 2 pi delta_w max|n - 1|. At a source's own pixel its first-order part cancels (the
// errors of visibilities on either side of a plane have opposite signs), leaving a loss of about
// 0.027 phi_w^2 (measured, 8 to 32 planes on a 14-degree field) and 0.01 phi_w^2 on a 17-degree
// SKA-Low field at 150 MHz with Briggs weighting and nine sources out to 8 degrees (97, 300 and 1000
// planes: phi_w 0.94, 0.30, 0.09; bench/wproj_wide_field.py): second order, sidelobes included.
// Model: 0.05 phi_w^2.
//
// Lookup: the nearest kernel sample moves a visibility by up to 1/(2 o) of a uv cell on each axis,
// phi_o = sqrt(2) pi (1/(2 o)) (image_size / grid_size) at the image's corners. The grid correction's
// sinc^2 removes its mean; the rest is second order at the peak: 0.023-0.031 phi_o^2 at oversample
// 2 (after the floor below). Model: 0.03 phi_o^2. It also stands for the spheroidal's edge error,
// which grows as padding falls, as phi_o does: padding 1.2 reaches 1e-2 but not 1e-3 (2.4e-3 to
// 4.1e-3 with 512 planes at oversample 8), padding 2 reaches 1e-3 (4.3e-4 to 6.5e-4). Above
// oversample 8 the peak error rose again on both fields (8.8e-4 to 1.4e-3 at 12 and 16, padding 2;
// not from the FFT size: 240 to 1008 points gave the same): epsilon uses at most 8.
constexpr double kWQuadratic = 0.05, kLookupQuadratic = 0.03;
constexpr double kWShare = 0.4;  // of epsilon, to the w-planes; the rest to the lookup
constexpr int kMaxEpsilonOversample = 8;
// The accuracy the automatic settings (w_planes 0, oversample 0, no epsilon) aim at.
constexpr double kAutoEpsilon = 1e-3;
constexpr int kMaxAutoOversample = 16;
double wplane_model(double phi) { return kWQuadratic * phi * phi; }
double lookup_model(double phi) { return kLookupQuadratic * phi * phi; }
// Above this predicted w-plane error (0.5 % of a peak) the stage warns about given w_planes.
constexpr double kWarnWError = 5e-3;

double field_max_n_minus_1(int image_size, double cell_rad) {
  const double l = image_size * std::sin(cell_rad) / 2;
  return 1 - std::sqrt(1 - std::min(2 * l * l, 1.0));
}

double wplane_error(const WProjSizes& z, double max_abs_w) {
  const double dw = z.planes <= 1 ? max_abs_w : (std::sqrt(max_abs_w * z.w_scale) + 0.5) / z.w_scale;
  return wplane_model(2 * M_PI * std::min(dw, max_abs_w) * z.max_n_minus_1);
}

double lookup_error(int image_size, int grid_size, int oversample) {
  return lookup_model(std::sqrt(2.0) * M_PI * image_size / (2.0 * oversample * grid_size));
}

// Support (cells) of the kernel at |w|: the screen's largest frequency, w l / n at the padded
// field's edge l (grid_size sin(cell) / 2, where the taper ends), in cells of 1 / (grid_size sin(cell)),
// plus the spheroidal's own half-width (3 cells at a 1e-3 threshold) and one cell of margin.
int support_estimate(const WProjSizes& z, double w) {
  const double u_cell = z.geom.grid_size * std::sin(z.geom.cell_rad);
  const double l = std::min(u_cell / 2, 0.999);
  return int(std::ceil(w * l / std::sqrt(1 - l * l) * u_cell)) + 4;
}

std::string fmt_g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// ------------------------------------------------------------------ kernel generation

// Per-thread scratch: one plane's FFT buffer and one quadrant row of screen values.
struct Scratch {
  fftw::Buffer buf;
  std::vector<cfloat> row;
};

// The forward 2-D FFT of one plane's screen, pruned to what the kept quarter needs: the screen is
// zero outside `inner` rows, so only those rows are transformed along u, and only the quarter's
// columns along v. About 2.7x fewer 1-D transforms than the full 2-D FFT at oversample 4, same values.
class PlaneTransform {
 public:
  // Plans on `plan_buffer` (any FFTW-aligned conv_size^2 buffer), from wisdom when it has these
  // transforms, else measured or estimated.
  PlaneTransform(const WProjSizes& z, cfloat* plan_buffer, bool measure)
      : z_(z), h_(z.inner / 2), q_(z.conv_size / 2 - 1) {
    const int n = z.conv_size;
    fftwf_iodim dim{n, 1, 1};
    // The screen's rows [0, h) and [n-h, n): two blocks of h rows.
    fftwf_iodim rows[2] = {{2, (n - h_) * n, (n - h_) * n}, {h_, n, n}};
    auto* b = fftw::as_fftw(plan_buffer);
    auto make_plans = [&](unsigned f) {
      rows_ = fftw::plan(1, [&] { return fftwf_plan_guru_dft(1, &dim, 2, rows, b, b, FFTW_FORWARD, f); });
      cols_ = fftw::plan(
          1, [&] { return fftwf_plan_many_dft(1, &n, q_, b, nullptr, n, 1, b, nullptr, n, 1, FFTW_FORWARD, f); });
    };
    make_plans(FFTW_MEASURE | FFTW_WISDOM_ONLY);
    from_wisdom_ = rows_ && cols_;
    if (!from_wisdom_) make_plans(measure ? FFTW_MEASURE : FFTW_ESTIMATE);
    if (!rows_ || !cols_)
      throw std::runtime_error("kernels.wproj: FFTW could not plan the kernel transform of size " + std::to_string(n));

    // Taper products and n - 1 over one quadrant (a, b) in [0, h]^2: the screen is even in l and m
    // apart from its first row and column (index -h), which have no mirror at +h.
    taper2_.assign(std::size_t(h_ + 1) * (h_ + 1), 0.0);
    n_minus_1_.assign(taper2_.size(), 0.0);
    std::vector<double> taper(h_ + 1);
    for (int a = 0; a <= h_; ++a) taper[a] = grdsf(double(a) / double(h_));  // T(ix) = grdsf(|ix| / h)
    for (int b = 0; b <= h_; ++b)
      for (int a = 0; a <= h_; ++a) {
        const double l = z.dl * a, m = z.dl * b, r2 = l * l + m * m;
        if (r2 >= 1.0) continue;
        taper2_[std::size_t(b) * (h_ + 1) + a] = taper[a] * taper[b];
        n_minus_1_[std::size_t(b) * (h_ + 1) + a] = std::sqrt(1.0 - r2) - 1.0;
      }
  }

  int quarter() const { return q_; }
  bool from_wisdom() const { return from_wisdom_; }

  // Plane k's kernel, unnormalised, into scratch.buf: K[iy][ix] at buf[iy*conv_size + ix] for
  // iy, ix < quarter().
  void operator()(int k, Scratch& scratch) const {
    const int n = z_.conv_size, h = h_;
    cfloat* buf = scratch.buf.get();
    cfloat* vals = scratch.row.data();
    const double f = 2 * M_PI * (k == 0 ? 0.0 : double(k) * k / z_.w_scale);
    // Rows outside the screen enter the column transforms as zeros.
    for (int r = h; r < n - h; ++r) std::fill_n(buf + std::size_t(r) * n, q_, cfloat(0));
    // Screen row iy (negative iy wrapped to iy + n): ix in [0, h) at ix, ix in [-h, 0) at ix + n.
    auto put_row = [&](int iy) {
      cfloat* row = buf + std::size_t(iy >= 0 ? iy : iy + n) * n;
      std::copy(vals, vals + h, row);
      std::fill(row + h, row + n - h, cfloat(0));
      for (int a = 1; a <= h; ++a) row[n - a] = vals[a];
    };
    for (int b = 0; b <= h; ++b) {
      const double* t2 = taper2_.data() + std::size_t(b) * (h + 1);
      const double* nm = n_minus_1_.data() + std::size_t(b) * (h + 1);
      for (int a = 0; a <= h; ++a) {
        const double ph = f * nm[a];
        vals[a] = cfloat(float(t2[a] * std::cos(ph)), float(t2[a] * std::sin(ph)));
      }
      if (b < h) put_row(b);
      if (b > 0) put_row(-b);
    }
    fftwf_execute_dft(rows_.get(), fftw::as_fftw(buf), fftw::as_fftw(buf));
    fftwf_execute_dft(cols_.get(), fftw::as_fftw(buf), fftw::as_fftw(buf));
  }

 private:
  const WProjSizes& z_;
  int h_, q_;
  bool from_wisdom_ = false;
  std::vector<double> taper2_, n_minus_1_;
  fftw::Plan rows_, cols_;
};

// Support of a plane from its kernel in `buf`: the last j with |K[j][0]| or |K[0][j]| above thr,
// capped at max_support (counted in `capped`: a capped kernel is truncated, which costs accuracy).
int plane_support(const cfloat* buf, int n, int quarter, int oversample, double thr, int max_support,
                  std::atomic<int>& capped) {
  const double thr2 = thr * thr;
  auto above = [&](cfloat c) { return double(c.real()) * c.real() + double(c.imag()) * c.imag() > thr2; };
  int j = quarter - 1;
  while (j > 0 && !above(buf[std::size_t(j) * n]) && !above(buf[j])) --j;
  const int support = 1 + int(0.5 + double(j) / oversample);
  if (support > max_support) ++capped;
  return std::min(support, max_support);
}

// Generates the stack's supports and compacted, normalised quarter kernels.
void generate(const WProjSizes& z, double threshold, const std::filesystem::path& wisdom, KernelStack& ks,
              bool pinned) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = z.conv_size, o = z.oversample, planes = z.planes;
  if (!wisdom.empty()) fftw::import_wisdom(wisdom);
  tbb::enumerable_thread_specific<Scratch> scratch([&] {
    return Scratch{fftw::alloc(std::size_t(n) * n), std::vector<cfloat>(z.inner / 2 + 1)};
  });
  Scratch& first = scratch.local();
  const bool measure = planes >= kMeasurePlanesPerThread * fftw::tbb_threads();
  const PlaneTransform transform(z, first.buf.get(), measure);
  if (!wisdom.empty() && measure && !transform.from_wisdom() && !fftw::export_wisdom(wisdom))
    spdlog::warn("kernels.wproj: could not write FFTW wisdom to {}", wisdom.string());
  const double t_plan = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Plane 0 first: its peak sets the threshold (every screen has plane 0's moduli and plane 0's is
  // real and positive, so |K_k[0][0]| <= K_0[0][0] for all k) and its support sets the norm.
  const int q = transform.quarter();
  transform(0, first);
  const cfloat* k0 = first.buf.get();
  const double thr = threshold * std::abs(std::complex<double>(k0[0]));
  ks.support = Array<std::int32_t>::host(planes);
  std::atomic<int> capped = 0;
  ks.support[0] = plane_support(k0, n, q, o, thr, z.max_support(), capped);
  const int s0 = ks.support[0];
  double norm = 0;
  for (int iy = -s0; iy <= s0; ++iy)
    for (int ix = -s0; ix <= s0; ++ix) norm += k0[std::size_t(std::abs(iy) * o) * n + std::abs(ix) * o].real();
  if (!(norm > 0))
    throw std::runtime_error("kernels.wproj: plane 0 sums to " + std::to_string(norm) + " at integer offsets");
  const float scale = float(1.0 / norm);

  // Compacted planes are kept apart until every support is known, then packed.
  std::vector<std::vector<cfloat>> compact(planes);
  auto keep = [&](int p, const cfloat* buf) {
    const int S = kernel_half_size(o, ks.support[p]);
    auto& c = compact[p];
    c.resize(std::size_t(S) * S);
    for (int iy = 0; iy < S; ++iy) {
      const cfloat* src = buf + std::size_t(iy) * n;
      cfloat* dst = c.data() + std::size_t(iy) * S;
      for (int ix = 0; ix < S; ++ix) dst[ix] = src[ix] * scale;
    }
  };
  keep(0, k0);
  tbb::parallel_for(1, planes, [&](int p) {
    Scratch& mine = scratch.local();
    transform(p, mine);
    ks.support[p] = plane_support(mine.buf.get(), n, q, o, thr, z.max_support(), capped);
    keep(p, mine.buf.get());
  });
  scratch.clear();

  std::int64_t total = 0;
  const auto start = quarter_offsets(ks.support, o, &total);
  ks.quarter = Array<cfloat>::host(std::size_t(total), pinned);
  tbb::parallel_for(0, planes, [&](int p) {
    std::copy(compact[p].begin(), compact[p].end(), ks.quarter.data() + start[p]);
    std::vector<cfloat>().swap(compact[p]);
  });
  const double t_all = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info(
      "kernels.wproj: generated {} planes of {}^2-point FFTs (supports {}..{}) in {:.2f} s on {} threads; "
      "FFTW plans {} in {:.2f} s",
      planes, n, ks.support[0], *std::max_element(ks.support.begin(), ks.support.end()), t_all, fftw::tbb_threads(),
      transform.from_wisdom() ? "from wisdom"
      : measure               ? "measured"
                              : "estimated",
      t_plan);
  ks.truncated_planes = capped.load();
}

// Said whether the stack was made or read from the cache.
void warn_if_truncated(const WProjSizes& z, const KernelStack& ks) {
  if (ks.truncated_planes == 0) return;
  // What helps: a smaller oversample always (the kernels then fit in fewer samples); a larger
  // max_conv_size only where it capped the FFT; never a larger padding, which widens the kernels
  // as much as the FFT.
  std::string advice;
  if (z.auto_planes || z.auto_oversample)
    advice = "the FFT was sized for an estimate of the widest kernel that fell short; set a smaller oversample";
  else if (z.conv_capped)
    advice = "raise max_conv_size or lower oversample, or leave w_planes or oversample 0 (automatic), which sizes "
             "the FFT for the widest kernel";
  else
    advice = "lower oversample, or leave w_planes or oversample 0 (automatic), which sizes the FFT for the widest "
             "kernel; max_conv_size does not help (the FFT is padding x image_size points, below it), nor does padding "
             "(it widens the kernels as much as the FFT)";
  spdlog::warn("kernels.wproj: {} of {} planes have kernels wider than the largest support a {}-point FFT holds at "
               "oversample {} ({}); they are truncated there, which costs accuracy: {}",
               ks.truncated_planes, z.planes, z.conv_size, z.oversample, z.max_support(), advice);
}

// ------------------------------------------------------------------ cache

template <class T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Everything the stack depends on, serialised: the cache file's header and its name's hash.
std::string cache_key(const WProjSizes& z, double threshold) {
  std::string k(kCacheMagic, sizeof kCacheMagic);
  put(k, kCacheVersion);
  put(k, std::int32_t(z.geom.image_size));
  put(k, std::int32_t(z.geom.grid_size));
  put(k, z.geom.cell_rad);
  put(k, std::int32_t(z.oversample));
  put(k, std::int32_t(z.conv_size));
  put(k, std::int32_t(z.planes));
  put(k, z.max_w);
  put(k, z.w_scale);
  put(k, threshold);
  return k;
}

// A fast 64-bit hash (FNV-style over 8-byte words) to name cache files and detect corruption.
std::uint64_t hash_bytes(const void* data, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  constexpr std::uint64_t prime = 0x100000001b3ull;
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * prime;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * prime;
  return h;
}

std::filesystem::path cache_file(const std::filesystem::path& dir, const std::string& key) {
  char name[40];
  std::snprintf(name, sizeof name, "wproj-%016llx.bin",
                static_cast<unsigned long long>(hash_bytes(key.data(), key.size())));
  return dir / name;
}

// File: key, support[planes] (int32), truncated planes (int32), count (uint64), quarter[count]
// (complex64), checksum (uint64).
// Returns why the file cannot be used, or "" when `ks` was filled from it.
std::string read_cache(const std::filesystem::path& file, const std::string& key, int planes, int oversample,
                       KernelStack& ks, bool pinned) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return "cannot open it";
  std::string head(key.size(), '\0');
  if (!f.read(head.data(), std::streamsize(head.size()))) return "truncated header";
  if (head != key) return "made with other parameters or by another format version";
  auto support = Array<std::int32_t>::host(planes);
  std::uint64_t count = 0, checksum = 0;
  std::int32_t truncated = 0;
  if (!f.read(reinterpret_cast<char*>(support.data()), std::streamsize(planes * sizeof(std::int32_t))) ||
      !f.read(reinterpret_cast<char*>(&truncated), sizeof truncated) ||
      !f.read(reinterpret_cast<char*>(&count), sizeof count))
    return "truncated supports";
  if (truncated < 0 || truncated > planes) return "invalid count of truncated planes " + std::to_string(truncated);
  for (auto s : support)
    if (s < 1) return "invalid support " + std::to_string(s);
  std::int64_t expected = 0;
  quarter_offsets(support, oversample, &expected);
  if (count != std::uint64_t(expected))
    return "holds " + std::to_string(count) + " kernel values, its supports need " + std::to_string(expected);
  auto quarter = Array<cfloat>::host(count, pinned);
  if (!f.read(reinterpret_cast<char*>(quarter.data()), std::streamsize(count * sizeof(cfloat))) ||
      !f.read(reinterpret_cast<char*>(&checksum), sizeof checksum))
    return "truncated kernels";
  if (f.peek() != std::ifstream::traits_type::eof()) return "trailing bytes";
  std::uint64_t h = hash_bytes(key.data(), key.size());
  h = hash_bytes(support.data(), planes * sizeof(std::int32_t), h);
  h = hash_bytes(&truncated, sizeof truncated, h);
  h = hash_bytes(&count, sizeof count, h);
  h = hash_bytes(quarter.data(), count * sizeof(cfloat), h);
  if (h != checksum) return "checksum mismatch (corrupt file)";
  ks.support = support;
  ks.truncated_planes = truncated;
  ks.quarter = quarter;
  return "";
}

// Returns whether the file was written.
bool write_cache(const std::filesystem::path& file, const std::string& key, const KernelStack& ks) {
  std::error_code ec;
  std::random_device rd;
  auto tmp = file;
  tmp += ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  const std::uint64_t count = ks.quarter.size();
  const std::int32_t truncated = ks.truncated_planes;
  std::uint64_t h = hash_bytes(key.data(), key.size());
  h = hash_bytes(ks.support.data(), ks.support.size() * sizeof(std::int32_t), h);
  h = hash_bytes(&truncated, sizeof truncated, h);
  h = hash_bytes(&count, sizeof count, h);
  h = hash_bytes(ks.quarter.data(), count * sizeof(cfloat), h);
  bool ok;
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(key.data(), std::streamsize(key.size()));
    f.write(reinterpret_cast<const char*>(ks.support.data()),
            std::streamsize(ks.support.size() * sizeof(std::int32_t)));
    f.write(reinterpret_cast<const char*>(&truncated), sizeof truncated);
    f.write(reinterpret_cast<const char*>(&count), sizeof count);
    f.write(reinterpret_cast<const char*>(ks.quarter.data()), std::streamsize(count * sizeof(cfloat)));
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    f.close();
    ok = bool(f);
  }
  if (ok) std::filesystem::rename(tmp, file, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp, ec);
    spdlog::warn("kernels.wproj: could not write the kernel cache {}", file.string());
    return false;
  }
  return true;
}

// ------------------------------------------------------------------ stage

class WProj : public DeclaredStage<kernels_wproj::decl> {
 public:
  const WProjSettings& settings() const { return s_; }
  // The cache file of the stack these sizes make ("" without a cache).
  std::filesystem::path cache_file_of(const WProjSizes& z) const {
    return cache_dir_.empty() ? std::filesystem::path() : cache_file(cache_dir_, cache_key(z, s_.support_threshold));
  }
  void check(const Params& p) override {
    s_.image_size = int(p.image_size);
    s_.cell_rad = p.cell_arcsec * kArcsecToRad;
    s_.padding = p.padding;
    s_.oversample = int(p.oversample);
    s_.w_planes = int(p.w_planes);
    s_.max_conv_size = int(p.max_conv_size);
    s_.support_threshold = p.support_threshold;
    s_.epsilon = p.epsilon;
    s_.oskar_planes = p.plane_rule == "oskar";
    cache_dir_ = p.cache_dir.empty() ? std::filesystem::path() : kernel_cache::expand(p.cache_dir.string());
    const std::string& l = p.layouts;
    layouts_.rows = l == "rows" || l == "all";
    layouts_.gpu = l == "gpu" || l == "all";
    cheb_terms_ = int(p.chebyshev);
    cheb_in_r_ = p.chebyshev_variable == "r";
    if (s_.image_size % 2)
      throw ParamError("image_size", "image_size must be even (the phase centre sits on pixel image_size/2)");
    if (s_.oversample % 2)
      throw ParamError("oversample", "oversample must be even (sub-cell offsets run over [-o/2, o/2])");
    if (s_.image_size * std::sin(s_.cell_rad) >= 2.0)
      throw ParamError("cell_arcsec",
                       "image_size * cell_arcsec spans more than the sky: image_size * sin(cell) must be < 2");
    // Kernel sizes do not depend on the data: check them now.
    // (The FFT the stage sizes for the widest kernel depends on the data's w: checked in process.)
    WProjSettings unbounded = s_;
    if (s_.epsilon > 0 || (s_.w_planes == 0 && !s_.oskar_planes) || s_.oversample == 0) unbounded.max_conv_size = std::numeric_limits<int>::max();
    const WProjSizes z = wproj_sizes(unbounded, Observation{});
    if (s_.epsilon > 0 && s_.w_planes > 0)
      spdlog::warn("kernels.wproj: w_planes {} is ignored: epsilon {} chooses the planes", s_.w_planes, fmt_g(s_.epsilon));
    if (s_.epsilon > 0 && s_.oversample > 0)
      spdlog::warn("kernels.wproj: oversample {} is ignored: epsilon {} chooses the oversampling", s_.oversample,
                   fmt_g(s_.epsilon));
    if (s_.epsilon > 0 && s_.oskar_planes)
      spdlog::warn("kernels.wproj: plane_rule oskar is ignored: epsilon {} chooses the planes", fmt_g(s_.epsilon));
    // Whatever the data, the FFT is at most max_conv_size: it must hold a support of 1.
    WProjSizes smallest = z;
    smallest.conv_size = std::min(z.conv_size, s_.max_conv_size);
    smallest.conv_size -= smallest.conv_size % (2 * z.oversample);
    if (smallest.max_support() < 1)
      throw ParamError(smallest.conv_size < z.conv_size || z.conv_capped ? "max_conv_size" : "image_size",
                       "the kernel FFT size " + std::to_string(smallest.conv_size) +
                           " leaves no room for a support of 1 at oversample " + std::to_string(z.oversample) +
                           " (needs at least " + std::to_string(3 * z.oversample + 4) + ")");
  }

  void prepare(PrepareContext& pc) override { layouts_.pinned = pc.pinned(kernels_wproj::kernels.name); }

  void process(Context& ctx) override {
    auto info = ctx.in(kernels_wproj::info);
    if (!info->obs) throw InputError("kernels.wproj: input 'info' carries no observation");
    const WProjSizes z = wproj_sizes(s_, *info->obs);
    report_accuracy(z, info->obs->max_abs_w);
    auto ks = std::make_shared<KernelStack>();
    ks->geom = z.geom;
    ks->oversample = z.oversample;
    ks->conv_size = z.conv_size;
    ks->planes = z.planes;
    ks->w_scale = z.w_scale;
    ks->max_w = z.max_w;

    const std::string key = cache_key(z, s_.support_threshold);
    const auto file = cache_file_of(z);
    if (!file.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(cache_dir_, ec);
      if (ec) spdlog::warn("kernels.wproj: cannot create the cache directory {}: {}", cache_dir_.string(), ec.message());
    }
    bool cached = false;
    if (!file.empty() && std::filesystem::exists(file)) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::string why = read_cache(file, key, z.planes, z.oversample, *ks, layouts_.pinned);
      cached = why.empty();
      if (cached) {
        kernel_cache::touch(file);  // recently used: evicted last
        spdlog::info("kernels.wproj: {} planes loaded from {} in {:.2f} s", z.planes, file.string(),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      } else
        spdlog::warn("kernels.wproj: ignoring cache file {}: {}; recomputing", file.string(), why);
    }
    if (!cached) {
      generate(z, s_.support_threshold, cache_dir_.empty() ? std::filesystem::path() : cache_dir_ / "fftwf.wisdom", *ks,
               layouts_.pinned);
      if (!file.empty() && write_cache(file, key, *ks)) report_growth(file);
    }
    warn_if_truncated(z, *ks);
    build_kernel_layouts(*ks, layouts_);
    if (cheb_terms_ > 0) fit(*ks);
    ctx.emit(kernels_wproj::kernels, ks);
  }

 private:
  // The cache grew by `file`: say so, with what it holds, and evict the least recently used
  // files beyond the cap.
  void report_growth(const std::filesystem::path& file) const {
    std::error_code ec;
    const auto added = std::filesystem::file_size(file, ec);
    const auto cap = kernel_cache::cap_bytes();
    const auto t = kernel_cache::trim(cache_dir_, cap);
    spdlog::info("kernels.wproj: cached the stack ({}) in {}; the cache holds {}{}{} (`uvflow cache clear` empties it)",
                 bytes_text(ec ? 0 : added), cache_dir_.string(), bytes_text(t.total),
                 cap ? " of its " + bytes_text(cap) + " cap" : std::string(),
                 t.removed ? ", after removing " + std::to_string(t.removed) + " least recently used (" +
                                 bytes_text(t.removed_bytes) + ")"
                           : std::string());
  }

  // The error models' prediction; a warning, naming what helps, when given w-planes are too few for
  // the field (more planes, not a larger FFT, is what lowers that error).
  void report_accuracy(const WProjSizes& z, double max_abs_w) const {
    spdlog::info("kernels.wproj: {} w-planes, oversample {}, {}-point kernel FFTs; predicted peak errors {:.2g} "
                 "(w-planes, |n - 1| up to {:.3g}) and {:.2g} (kernel lookup){}",
                 z.planes, z.oversample, z.conv_size, z.w_error, z.max_n_minus_1, z.lookup_error,
                 s_.epsilon > 0 ? " for epsilon " + fmt_g(s_.epsilon)
                 : z.auto_planes || z.auto_oversample ? " (automatic, for about " + fmt_g(z.target) + ")"
                                                       : std::string());
    if (!z.auto_planes && z.w_error > kWarnWError)
      spdlog::warn("kernels.wproj: {} w-planes are too few for this field: |w| up to {} and |n - 1| up to {:.3g} at "
                   "the image corners bound source peak errors at about {:.2g} % (the bound is cautious: measured errors were 2 "
                   "to 5 times smaller); leave w_planes 0 (automatic, chosen for this field), raise it (the error falls as "
                   "1/w_planes^2) or set epsilon (the accuracy wanted, e.g. 1e-3); max_conv_size and padding do not help",
                   z.planes, fmt_g(max_abs_w), z.max_n_minus_1, 100 * z.w_error);
  }

  // The Chebyshev fit (chebyshev > 0) and how well it matches the table.
  void fit(KernelStack& ks) const {
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = fit_chebyshev(ks, cheb_terms_, cheb_in_r_, layouts_.pinned);
    std::size_t rms = 0, max = 0, fewer = 0, least = 0;
    for (std::size_t p = 0; p < errors.size(); ++p) {
      if (errors[p].rms > errors[rms].rms) rms = p;
      if (errors[p].max > errors[max].max) max = p;
      if (errors[p].terms < cheb_terms_) ++fewer;
      if (errors[p].terms < errors[least].terms) least = p;
    }
    spdlog::info("kernels.wproj: Chebyshev fit, {} terms in {}, over r <= support + 1/2: worst RMS error {:.3g} (plane {}, "
                 "support {}), worst largest error {:.3g} (plane {}, support {}), of each plane's peak; {} planes "
                 "with fewer terms (ill-conditioned beyond; down to {} on plane {}, support {}); {:.2f} s",
                 cheb_terms_, cheb_in_r_ ? "r" : "r^2", errors[rms].rms, rms, ks.support[rms], errors[max].max, max,
                 ks.support[max], fewer, errors[least].terms, least, ks.support[least],
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  WProjSettings s_;
  std::filesystem::path cache_dir_;
  KernelLayouts layouts_;
  int cheb_terms_ = 0;
  bool cheb_in_r_ = false;
};

}  // namespace

int WProjSizes::max_support() const {
  // S = o/2 + o*s + 1 must fit in the kept quarter of conv_size/2 - 1 samples.
  return (conv_size / 2 - 2 - oversample / 2) / oversample;
}

int wproj_grid_size(int image_size, double padding) {
  std::int64_t n = std::int64_t(padding * image_size - 0.5) + 1;
  while (n % 2 || !is_5_smooth(n)) ++n;
  return int(n);
}

WProjSizes wproj_sizes(const WProjSettings& s, const Observation& obs) {
  WProjSizes z;
  z.geom.image_size = s.image_size;
  z.geom.grid_size = wproj_grid_size(s.image_size, s.padding);
  z.geom.cell_rad = s.cell_rad;
  const double wmax = obs.max_abs_w, wmin = obs.min_abs_w, wrms = obs.rms_abs_w;
  if (!std::isfinite(wmax) || !std::isfinite(wmin) || !std::isfinite(wrms) || wmax < 0 || wmin < 0 || wrms < 0 ||
      wmin > wmax)
    throw InputError("kernels.wproj: unusable w statistics in input 'info': max|w| " + std::to_string(wmax) +
                     ", min|w| " + std::to_string(wmin) + ", rms|w| " + std::to_string(wrms));
  if (wmax > 0) {
    z.max_w = 1.05 * wmax;
    const double mid = 0.5 * (wmin + wmax);
    if (wrms > mid) z.max_w *= wrms / mid;
  } else {
    z.max_w = 0.25 / s.cell_rad;  // no w spread: OSKAR's fallback, a quarter of the largest uv
  }
  z.max_n_minus_1 = field_max_n_minus_1(s.image_size, s.cell_rad);
  // What the stage chooses: everything with epsilon; with w_planes or oversample 0, those, for
  // kAutoEpsilon. Both from the error models: kWShare of the accuracy to the w-planes, the rest to
  // the lookup.
  const bool given_epsilon = s.epsilon > 0;
  z.auto_planes = given_epsilon || (s.w_planes == 0 && !s.oskar_planes);
  z.auto_oversample = given_epsilon || s.oversample == 0;
  z.target = given_epsilon ? s.epsilon : kAutoEpsilon;
  // The subject of the errors below: what asked for the sizes.
  const std::string asked = given_epsilon ? "epsilon " + fmt_g(s.epsilon) + " needs" : std::string("the automatic settings need");
  if (z.auto_planes) {
    // The smallest count whose quantisation error (wplane_error) is within its share;
    // w_scale = (planes-1)^2 / max_w makes delta_w about sqrt(max|w| max_w) / (planes-1).
    // phase_budget: the largest phi_w the model allows.
    const double phase_budget = std::sqrt(kWShare * z.target / kWQuadratic);
    const double dw = phase_budget / (2 * M_PI * std::max(z.max_n_minus_1, 1e-300));
    double planes = (wmax > 0 ? std::ceil(std::sqrt(wmax * z.max_w) / dw + 0.5) : 0) + 1;
    // Never fewer than OSKAR's count (at least 16), which narrow fields keep.
    if (!given_epsilon) planes = std::max(planes, std::max(16.0, z.max_w * std::fabs(std::sin(s.cell_rad * s.image_size / 2.0))));
    if (planes > kMaxPlanes)
      throw InputError("kernels.wproj: " + asked + " " + std::to_string(std::int64_t(planes)) +
                       " w-planes for |w| up to " + fmt_g(wmax) + " and |n - 1| up to " + fmt_g(z.max_n_minus_1) +
                       ", more than the " + std::to_string(kMaxPlanes) + " supported; " +
                       (given_epsilon ? "raise epsilon" : "set w_planes (fewer planes: larger peak errors) or epsilon") +
                       ", or image a smaller field");
    z.planes = int(planes);
  } else if (s.w_planes > 0) {
    z.planes = s.w_planes;
  } else {  // plane_rule oskar
    z.planes = int(std::max(16.0, z.max_w * std::fabs(std::sin(s.cell_rad * s.image_size / 2.0))));
  }
  if (z.auto_oversample) {
    // The smallest even oversampling whose lookup error is within the rest. Automatic settings take
    // the most they allow when none is; epsilon, which promises its accuracy, refuses.
    const int most = given_epsilon ? kMaxEpsilonOversample : kMaxAutoOversample;
    z.oversample = 0;
    for (int o = 2; o <= most && !z.oversample; o += 2)
      if (lookup_error(s.image_size, z.geom.grid_size, o) <= (1 - kWShare) * z.target) z.oversample = o;
    if (!z.oversample && given_epsilon)
      throw InputError("kernels.wproj: epsilon " + fmt_g(s.epsilon) + " needs a kernel oversampling above " +
                       std::to_string(kMaxEpsilonOversample) + " at padding " +
                       fmt_g(s.padding) + "; raise epsilon or padding");
    if (!z.oversample) z.oversample = most;
  } else {
    z.oversample = s.oversample;
  }
  const int o = z.oversample;
  z.w_scale = double(z.planes - 1) * (z.planes - 1) / z.max_w;
  z.w_error = wplane_error(z, wmax);
  z.lookup_error = lookup_error(s.image_size, z.geom.grid_size, o);
  // A multiple of 2 oversample, so that the taper's inner = conv_size/o samples are even and span
  // exactly the padded field that dl assumes. OSKAR keeps int(padding * image_size): when that is
  // not such a multiple (614 for 512 pixels at o = 4) its taper comes out up to one sample
  // narrower than the grid correction assumes, which costs about 1 % at the image edge and far
  // more when conv_size/o is small (measured by bench/image_accuracy). 2000 is unchanged.
  const int wanted = int(s.padding * s.image_size);
  z.conv_size = std::min(wanted, s.max_conv_size);
  z.conv_capped = z.conv_size < wanted;
  if (z.auto_planes || z.auto_oversample) {
    // The FFT must hold the widest kernel (the last plane's) with S = o/2 + o s + 1 in the
    // kept quarter of conv_size/2 - 1 samples (max_support()). (Settings all given keep OSKAR's
    // padding x image_size, capped, as the seeds' data sets do, and warn when it truncates.)
    const int support = support_estimate(z, z.planes > 1 ? z.max_w : 0.0);
    const std::int64_t need = (std::int64_t(o) * support + o / 2 + 2) / o * 2 * o + 2 * o;  // a multiple of 2 o
    if (need > s.max_conv_size) {
      double stack = 0;
      for (int k = 0; k < z.planes; ++k) {
        const double side = o / 2 + 1 + double(o) * support_estimate(z, double(k) * k / z.w_scale);
        stack += side * side * sizeof(cfloat);
      }
      throw InputError("kernels.wproj: " + asked + " kernel FFTs of " + std::to_string(need) +
                       " points to hold the widest kernel (support " + std::to_string(support) + " cells at oversample " +
                       std::to_string(o) + ", |w| " + fmt_g(z.max_w) + "): about " +
                       bytes_text(std::uint64_t(stack)) + " of kernels for " + std::to_string(z.planes) +
                       " planes plus " + bytes_text(std::uint64_t(need * need * sizeof(cfloat))) +
                       " of FFT buffer per thread; max_conv_size is " + std::to_string(s.max_conv_size) +
                       ": raise max_conv_size to " + std::to_string(need) +
                       (given_epsilon ? ", or raise epsilon" : ", or set a smaller oversample"));
    }
    z.conv_size = std::max(int(need), z.conv_size);
  }
  z.conv_size -= z.conv_size % (2 * o);
  z.inner = z.conv_size / o;
  // WPROJ.md: dl = (2 sin(fov/2) o / image_size) (grid_size / conv_size), 2 sin(fov/2) = image_size sin(cell).
  z.dl = std::sin(s.cell_rad) * o * double(z.geom.grid_size) / z.conv_size;
  return z;
}

}  // namespace uvflow

namespace uvflow::kernels_wproj {

namespace {

// Kernel generation: 5.6e9 (points x log2 points) of pruned plane FFT per second per core, measured
// on the VM (431 planes of 2000^2 in 3.38 s on 2 threads, small preset at 2048^2 pixels), and no
// faster beyond 2 threads: memory-bound, 16 threads of the H100's host made 751 planes of 1992^2 in
// 6.9 s (bench/results/auto_method.md). A cached stack loads at about 3e8 bytes/s (the VM: 6.9 MiB
// in 20 ms with its layouts).
constexpr double kPlaneFftRate = 5.6e9, kCacheReadRate = 3e8;
constexpr int kPlaneFftThreads = 2;

// The expected footprint (2s+1)^2 over the data's |w|: at the observation's quantiles of |w| where
// its source gave them, else at those of a half-normal distribution with its rms |w| (clipped to
// its range), each at its plane's estimated support.
double mean_footprint(const WProjSizes& z, const Observation& obs) {
  constexpr int kQuantiles = 64;
  std::vector<double> at = obs.abs_w_quantiles;
  for (int i = 0; at.empty() && i < kQuantiles; ++i) {
    const double q = (i + 0.5) / kQuantiles;  // P(|w| <= x) = erf(x / (sqrt(2) rms)): bisect for x
    double lo = 0, hi = 10 * std::max(obs.rms_abs_w, 1e-300);
    for (int k = 0; k < 60; ++k) {
      const double mid = 0.5 * (lo + hi);
      (std::erf(mid / (std::sqrt(2.0) * obs.rms_abs_w)) < q ? lo : hi) = mid;
    }
    at.push_back(0.5 * (lo + hi));
  }
  double sum = 0;
  for (double quantile : at) {
    const double w = std::clamp(quantile, obs.min_abs_w, obs.max_abs_w);
    const double k = z.planes > 1 ? std::round(std::sqrt(w * z.w_scale)) : 0;  // its plane
    // support_estimate bounds the support to size the FFT (a cell of margin, rounded up); 0.75 cell
    // less matched the supports kernels.wproj made on the small preset (1.16e8 updates, 1.15e8 run).
    const double support = std::min(support_estimate(z, k * k / std::max(z.w_scale, 1e-300)) - 0.75,
                                    double(z.max_support()));
    sum += (2 * support + 1) * (2 * support + 1);
  }
  return sum / double(at.size());
}

// The stack's sizes for the data (wproj_sizes), what making it costs (generated or read from the
// cache), and the kernel facts the gridders estimate from, with the predicted peak error of an
// image gridded with it (the error is the gridder's to report: weighting reads the stack too).
Estimate estimate(const Params& p, const PortShapes& in, const EstimateContext& c) {
  WProj stage;
  stage.check(p);
  auto it = in.find(info.name);
  if (it == in.end() || !it->second.obs) throw InputError("input 'info': no observation estimated before the run");
  const Observation& obs = *it->second.obs;
  const WProjSizes z = wproj_sizes(stage.settings(), obs);
  const double points = double(z.conv_size) * z.conv_size;
  KernelFacts k{z.planes, z.oversample, z.conv_size, std::min(support_estimate(z, z.max_w), z.max_support()),
                mean_footprint(z, obs), z.w_error + z.lookup_error, int(p.chebyshev)};
  std::error_code ec;
  const auto file = stage.cache_file_of(z);
  const auto cached_bytes = file.empty() ? 0 : std::filesystem::file_size(file, ec);
  const bool cached = !file.empty() && !ec;
  char basis[160];
  std::snprintf(basis, sizeof basis, "%d planes of %d^2-point FFTs, %s, mean footprint %.0f cells", z.planes,
                z.conv_size, cached ? "cached" : "not cached", k.mean_footprint);
  Estimate e{.seconds = cached ? double(cached_bytes) / kCacheReadRate
                               : z.planes * points * std::log2(points) /
                                     (kPlaneFftRate * std::clamp(c.threads, 1, kPlaneFftThreads)),
             .basis = basis};
  e.outputs[std::string(kernels.name)].kernel = k;
  return e;
}

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WProj>()}, estimate); }

}  // namespace uvflow::kernels_wproj
