#include "stages/image/psf_convolve.hpp"

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <spdlog/spdlog.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/error.hpp"
#include "stages/image/psf.hpp"
#include "stages/shared/fftw.hpp"

namespace uvflow::image_psf_convolve {

namespace {
std::string size_text(int nx, int ny) { return std::to_string(nx) + " x " + std::to_string(ny); }
}  // namespace

void StreamCheck::check(const Image& frame, std::int64_t item, const Image& psf) {
  if (!frame.consistent())
    throw InputError("frame " + std::to_string(item) + " has " + std::to_string(frame.pixels.size()) +
                     " pixels, not nx * ny = " + size_text(frame.nx, frame.ny));
  if (first_ < 0) {
    image_psf::validate(psf, "input 'psf'");
    if (psf.nx > frame.nx || psf.ny > frame.ny)
      throw InputError("the PSF (" + size_text(psf.nx, psf.ny) + " pixels, width x height) is larger than frame " +
                       std::to_string(item) + " (" + size_text(frame.nx, frame.ny) +
                       "): the EDGE_WRAP convolution needs a PSF no larger than the frame");
    nx_ = frame.nx;
    ny_ = frame.ny;
    first_ = item;
    return;
  }
  if (frame.nx != nx_ || frame.ny != ny_)
    throw InputError("frame " + std::to_string(item) + " is " + size_text(frame.nx, frame.ny) +
                     " pixels (width x height) but the first frame of the stream (frame " + std::to_string(first_) +
                     ") was " + size_text(nx_, ny_) + ": one stream must hold frames of one size");
}

void throw_non_finite(std::int64_t item, int x, int y, bool nan) {
  throw InputError("frame " + std::to_string(item) + " pixel (x " + std::to_string(x) + ", y " + std::to_string(y) +
                   ") is " + (nan ? "NaN" : "infinite") +
                   ": the convolution needs finite frames (a NaN would spread over the PSF's reach, and over the "
                   "whole frame with method fft)");
}

int fft_size(int frame, int psf) {
  for (int m = (frame + psf - 1 + 7) / 8 * 8;; m += 8) {
    int r = m;
    for (int p : {2, 3, 5, 7})
      while (r % p == 0) r /= p;
    if (r == 1) return m;
  }
}

Method choose_cpu(int nx, int ny, int kx, int ky) {
  // CPU time per frame, calibrated on the 2-core benchmark machine (bench/results/straylight_cpu.md)
  // over PSFs of 1 to 255 pixels on 813 x 5271 and 5271 x 813 frames: direct costs a fixed
  // kDirectNsPerPixel (the widened rows, the output) plus its multiply-adds at kDirectMacPerNs;
  // fft costs kFftNsPerPointLog2 per point and log2(points) of its padded transforms, the work
  // around them included. The crossover on the report's frames is near a 14 x 14 PSF.
  constexpr double kDirectNsPerPixel = 3.1, kDirectMacPerNs = 28.0, kFftNsPerPointLog2 = 0.44;
  const double direct = double(nx) * ny * (kDirectNsPerPixel + double(kx) * ky / kDirectMacPerNs);
  const double points = double(fft_size(nx, kx)) * fft_size(ny, ky);
  const double fft = kFftNsPerPointLog2 * points * std::log2(points);
  return direct <= fft ? Method::direct : Method::fft;
}

Method choose_cuda(int nx, int ny, int kx, int ky) {
  // Device time per frame on the H100 (sm_90), the same two terms as choose_cpu: direct does
  // kY rounded up to its 8-row PSF pieces times kX multiply-adds per pixel at about a third of the
  // FP32 peak; fft costs about kFftNsPerPoint per point of its padded grid (pad, R2C, product, C2R
  // and crop, memory-bound: about 400 MB of traffic for 6 M points). Both constants are estimates
  // from the kernels' instruction and memory counts, to be checked against bench/straylight_gpu.sh;
  // the crossover on the report's frames is near a 25 x 25 PSF.
  constexpr double kDirectMacPerNs = 12000.0, kFftNsPerPoint = 0.05;
  const double direct = double(nx) * ny * double((ky + 7) / 8 * 8) * kx / kDirectMacPerNs;
  const double fft = kFftNsPerPoint * double(fft_size(nx, kx)) * fft_size(ny, ky);
  return direct <= fft ? Method::direct : Method::fft;
}

Method pick(const std::string& method, const std::string& backend, const std::string& stage_id, int nx, int ny,
            int kx, int ky) {
  const Method m = method == "direct" ? Method::direct
                   : method == "fft"  ? Method::fft
                   : backend == "cuda" ? choose_cuda(nx, ny, kx, ky)
                                       : choose_cpu(nx, ny, kx, ky);
  spdlog::info("image.psf_convolve '{}': method {} ({}) for {} x {} frames and a {} x {} PSF{}", stage_id,
               m == Method::direct ? "direct" : "fft", backend, nx, ny, kx, ky,
               m == Method::direct ? std::string()
                                   : fmt::format(" (transforms of {} x {})", fft_size(nx, kx), fft_size(ny, ky)));
  return m;
}

namespace {

// dst[x] = src[(start + x) mod n] for x < count: a periodic row as contiguous copies, no modulo
// per element.
void wrap_copy(const float* src, int n, int start, float* dst, std::size_t count) {
  while (count > 0) {
    const std::size_t m = std::min<std::size_t>(count, std::size_t(n - start));
    std::memcpy(dst, src + start, m * sizeof(float));
    dst += m;
    count -= m;
    start = 0;
  }
}

// First column of the periodic row that lands at x = 0 after Listing 4.1's shift by k/2.
int wrap_start(int n, int k) { return ((-(k / 2)) % n + n) % n; }

// Rows are checked in parallel: keep the lowest bad one, so the error names the first bad pixel
// whatever the scheduling.
void keep_lowest(std::atomic<int>& bad, int row) {
  int seen = bad.load();
  while ((seen < 0 || row < seen) && !bad.compare_exchange_weak(seen, row)) {
  }
}

// True when every value is finite; vectorises (an AND of comparisons).
bool finite(const float* p, int n) {
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= std::fabs(p[i]) <= FLT_MAX;
  return ok;
}

// Made for the frame and PSF sizes (in prepare() when they were described, so plans and buffers
// exist before the first frame), then given the PSF's values once, at the first frame.
class Convolver {
 public:
  Convolver(int nx, int ny, int kx, int ky) : nx_(nx), ny_(ny), kx_(kx), ky_(ky) {}
  virtual ~Convolver() = default;
  bool made_for(int nx, int ny, int kx, int ky) const { return nx == nx_ && ny == ny_ && kx == kx_ && ky == ky_; }
  virtual void load(const Image& psf) = 0;
  // Convolves one frame; returns -1, or a row of `in` holding a NaN or an infinity (then `out` is
  // incomplete). Rows are checked as they are copied, while they are in cache.
  virtual int run(const float* in, float* out) = 0;

 protected:
  int nx_, ny_, kx_, ky_;
};

// Listing 4.7's loop order, vectorised. Each frame row is first widened to W + kX - 1 pixels
// (its periodic continuation), so the x loops run over contiguous memory with no wrap test; rows
// wrap by index. For an output row p, PSF row k contributes
//   out[p][q] += sum_l E[(p - kY/2 + k) mod H][q + l] * psf[k][l],
// with E[y][x] = in[y][(x - kX/2) mod W]: the output lands at its final place with no rotation.
// The sum over l is kept in 8 AVX registers (64 columns) and added to the row once per PSF row,
// so rounding error grows with kX + kY rather than kX * kY.
class Direct : public Convolver {
  static constexpr int C = 64;  // columns per register block
  using Block = Eigen::Array<float, C, 1>;

 public:
  Direct(int nx, int ny, int kx, int ky)
      : Convolver(nx, ny, kx, ky), cols_((nx + C - 1) / C * C), stride_((cols_ + kx_ - 1 + 15) / 16 * 16),
        ext_(Array<float>::host(std::size_t(ny) * stride_)) {
    // Columns past W + kX - 1 only feed the discarded columns past W; zero keeps them finite.
    std::fill(ext_.begin(), ext_.end(), 0.0f);
  }

  void load(const Image& psf) override { psf_.assign(psf.pixels.begin(), psf.pixels.end()); }

  int run(const float* in, float* out) override {
    float* ext = ext_.data();
    const int start = wrap_start(nx_, kx_);
    std::atomic<int> bad{-1};
    tbb::parallel_for(tbb::blocked_range<int>(0, ny_, 32), [&](const tbb::blocked_range<int>& r) {
      for (int y = r.begin(); y < r.end(); ++y) {
        wrap_copy(in + std::size_t(y) * nx_, nx_, start, ext + std::size_t(y) * stride_, std::size_t(nx_ + kx_ - 1));
        if (!finite(in + std::size_t(y) * nx_, nx_)) keep_lowest(bad, y);
      }
    });
    if (bad >= 0) return bad;
    tbb::parallel_for(tbb::blocked_range<int>(0, ny_, 4), [&](const tbb::blocked_range<int>& r) {
      std::vector<float> acc(cols_);
      for (int p = r.begin(); p < r.end(); ++p) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        int row = p - ky_ / 2;
        if (row < 0) row += ny_;
        for (int k = 0; k < ky_; ++k, ++row) {
          if (row == ny_) row = 0;
          const float* e = ext + std::size_t(row) * stride_;
          const float* w = psf_.data() + std::size_t(k) * kx_;
          for (int q = 0; q < cols_; q += C) {
            Block s = Block::Zero();
            for (int l = 0; l < kx_; ++l) s += Eigen::Map<const Block>(e + q + l) * w[l];
            Eigen::Map<Block>(acc.data() + q) += s;
          }
        }
        std::memcpy(out + std::size_t(p) * nx_, acc.data(), std::size_t(nx_) * sizeof(float));
      }
    });
    return -1;
  }

 private:
  int cols_, stride_;
  std::vector<float> psf_;
  Array<float> ext_;
};

// Circular correlation by FFT without the native size's large prime factors (5271 = 3*7*251,
// 813 = 3*271 make FFTW several times slower): the frame is extended periodically to
// E[y][x] = in[(y - kY/2) mod H][(x - kX/2) mod W] on a smooth Py x Px >= (H + kY - 1) x
// (W + kX - 1) grid, whose cyclic correlation with the zero-padded PSF equals E's linear one on
// rows < H and columns < W: exactly Listing 4.1's output there, up to rounding.
//
// The 2-D transform is done as 1-D passes so that the work around it adds no sweep over memory.
// The half spectrum is stored in blocks of kBlock columns, each block Py rows of kBlock complex
// values, contiguous. Row pass: each row of E is built in a per-thread row buffer, transformed,
// and its kBlock-wide pieces (one cache line each) stored into the blocks. Column pass: each block
// is transformed along y, multiplied by the PSF spectrum (same layout) and transformed back while
// it sits in L2. Inverse row pass: only rows < H, gathered from the blocks, transformed back and
// copied into the output. The PSF spectrum (conjugated for a correlation, scaled by 1 / (Px Py))
// is made once per stream. The 1-D plans are single-threaded and run concurrently from oneTBB
// tasks.
class Fft : public Convolver {
  static constexpr int kBlock = 8;  // 8 complex = 64 bytes: one cache line per block row

 public:
  Fft(int nx, int ny, int kx, int ky, const std::string& wisdom)
      : Convolver(nx, ny, kx, ky), px_(fft_size(nx, kx)), py_(fft_size(ny, ky)), half_(px_ / 2 + 1),
        blocks_((half_ + kBlock - 1) / kBlock), block_size_(std::size_t(py_) * kBlock),
        grid_(fftw::alloc(blocks_ * block_size_)), spec_(fftw::alloc(blocks_ * block_size_)),
        scratch_([this] { return Scratch(half_, blocks_ * kBlock); }) {
    Scratch& sc = scratch_.local();
    fftwf_complex* b0 = fftw::as_fftw(grid_.get());
    if (!wisdom.empty()) fftw::import_wisdom(wisdom);
    // Measured plans are several times faster than estimated ones here; a stream pays the
    // planning once (about a second per size), and the wisdom file makes later runs skip it.
    // Planning overwrites the arrays, which are filled afterwards.
    row_fwd_ = fftw::plan_or_throw(1, [&] { return fftwf_plan_dft_r2c_1d(px_, sc.real(), sc.half(), FFTW_MEASURE); },
                                   "the row transform");
    row_inv_ = fftw::plan_or_throw(1, [&] { return fftwf_plan_dft_c2r_1d(px_, sc.half(), sc.real(), FFTW_MEASURE); },
                                   "the inverse row transform");
    col_fwd_ = fftw::plan_or_throw(1, [&] { return column_plan(b0, FFTW_FORWARD); }, "the column transform");
    col_inv_ = fftw::plan_or_throw(1, [&] { return column_plan(b0, FFTW_BACKWARD); }, "the inverse column transform");
    if (!wisdom.empty() && !fftw::export_wisdom(wisdom))
      spdlog::warn("image.psf_convolve: could not write FFTW wisdom to {}", wisdom);
  }

  void load(const Image& psf) override {
    Scratch& sc = scratch_.local();
    // The PSF spectrum: the zero-padded PSF's rows k < kY (the others are zero), then the columns.
    std::fill(spec_.get(), spec_.get() + blocks_ * block_size_, cfloat(0));
    std::fill(sc.real(), sc.real() + px_, 0.0f);
    for (int k = 0; k < ky_; ++k) {
      std::copy_n(psf.pixels.data() + std::size_t(k) * kx_, kx_, sc.real());
      fftwf_execute_dft_r2c(row_fwd_.get(), sc.real(), sc.half());
      scatter(sc, spec_.get(), k);
    }
    const float scale = 1.0f / (float(px_) * float(py_));
    tbb::parallel_for(std::size_t(0), blocks_, [&](std::size_t b) {
      cfloat* s = spec_.get() + b * block_size_;
      fftwf_execute_dft(col_fwd_.get(), fftw::as_fftw(s), fftw::as_fftw(s));
      for (std::size_t i = 0; i < block_size_; ++i) s[i] = std::conj(s[i]) * scale;
    });
  }

  int run(const float* in, float* out) override {
    const int start = wrap_start(nx_, kx_);
    std::atomic<int> bad{-1};
    tbb::parallel_for(tbb::blocked_range<int>(0, py_, 16), [&](const tbb::blocked_range<int>& r) {
      Scratch& sc = scratch_.local();
      for (int y = r.begin(); y < r.end(); ++y) {
        const int src = ((y - ky_ / 2) % ny_ + ny_) % ny_;
        wrap_copy(in + std::size_t(src) * nx_, nx_, start, sc.real(), std::size_t(px_));
        if (!finite(in + std::size_t(src) * nx_, nx_)) keep_lowest(bad, src);
        fftwf_execute_dft_r2c(row_fwd_.get(), sc.real(), sc.half());
        scatter(sc, grid_.get(), y);
      }
    });
    if (bad >= 0) return bad;
    tbb::parallel_for(std::size_t(0), blocks_, [&](std::size_t b) {
      fftwf_complex* g = fftw::as_fftw(grid_.get() + b * block_size_);
      fftwf_execute_dft(col_fwd_.get(), g, g);
      // Interleaved (re, im) pairs, written out so the compiler vectorises without NaN fix-ups.
      float* f = reinterpret_cast<float*>(g);
      const float* s = reinterpret_cast<const float*>(spec_.get() + b * block_size_);
      for (std::size_t i = 0; i < 2 * block_size_; i += 2) {
        const float re = f[i] * s[i] - f[i + 1] * s[i + 1], im = f[i] * s[i + 1] + f[i + 1] * s[i];
        f[i] = re;
        f[i + 1] = im;
      }
      fftwf_execute_dft(col_inv_.get(), g, g);
    });
    tbb::parallel_for(tbb::blocked_range<int>(0, ny_, 16), [&](const tbb::blocked_range<int>& r) {
      Scratch& sc = scratch_.local();
      for (int y = r.begin(); y < r.end(); ++y) {
        for (std::size_t b = 0; b < blocks_; ++b)
          std::memcpy(sc.half() + b * kBlock, grid_.get() + b * block_size_ + std::size_t(y) * kBlock,
                      kBlock * sizeof(cfloat));
        fftwf_execute_dft_c2r(row_inv_.get(), sc.half(), sc.real());
        std::memcpy(out + std::size_t(y) * nx_, sc.real(), std::size_t(nx_) * sizeof(float));
      }
    });
    return -1;
  }

 private:
  // One thread's row: Px reals, and the row's half spectrum padded to whole blocks (the padding
  // columns stay zero, so the column transforms over them stay finite).
  struct Scratch {
    Scratch(int half, std::size_t padded) : r(fftw::alloc(std::size_t(half))), c(fftw::alloc(padded)) {
      std::fill(c.get(), c.get() + padded, cfloat(0));
    }
    float* real() { return reinterpret_cast<float*>(r.get()); }
    fftwf_complex* half() { return fftw::as_fftw(c.get()); }
    fftw::Buffer r, c;
  };

  fftwf_plan column_plan(fftwf_complex* block, int sign) const {
    return fftwf_plan_many_dft(1, &py_, kBlock, block, nullptr, kBlock, 1, block, nullptr, kBlock, 1, sign,
                               FFTW_MEASURE);
  }

  // Stores row y of a half spectrum (in the scratch) into the blocked layout.
  void scatter(Scratch& sc, cfloat* dst, int y) const {
    for (std::size_t b = 0; b < blocks_; ++b)
      std::memcpy(dst + b * block_size_ + std::size_t(y) * kBlock, sc.c.get() + b * kBlock, kBlock * sizeof(cfloat));
  }

  int px_, py_, half_;
  std::size_t blocks_, block_size_;
  fftw::Buffer grid_, spec_;
  tbb::enumerable_thread_specific<Scratch> scratch_;
  fftw::Plan row_fwd_, row_inv_, col_fwd_, col_inv_;
};

class PsfConvolveCpu : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    method_ = p.method;
    wisdom_ = p.wisdom.string();
  }

  void prepare(PrepareContext& pc) override {
    pinned_ = pc.pinned(out_frame.name);
    const PortShape &f = pc.input(in_frame), &k = pc.input(psf);
    if (f.sized() && k.sized() && !pc.dry_run) make(pc.id, f.nx, f.ny, k.nx, k.ny);
  }

  void process(Context& ctx) override {
    auto in = ctx.in(in_frame);
    auto kernel = ctx.in(psf);
    check_.check(*in, ctx.item(), *kernel);
    if (!loaded_) {  // the first frame: the sizes are checked, the PSF is known
      if (!conv_ || !conv_->made_for(in->nx, in->ny, kernel->nx, kernel->ny))
        make(ctx.stage_id(), in->nx, in->ny, kernel->nx, kernel->ny);
      conv_->load(*kernel);
      loaded_ = true;
    }
    auto out = std::make_shared<Image>(*in);  // the frame's index, size and any WCS
    out->pixels = Array<float>::host(in->pixels.size(), pinned_);
    if (const int row = conv_->run(in->pixels.data(), out->pixels.data()); row >= 0) {
      const float* p = in->pixels.data() + std::size_t(row) * in->nx;
      const int x = int(std::find_if(p, p + in->nx, [](float v) { return !std::isfinite(v); }) - p);
      throw_non_finite(ctx.item(), x, row, std::isnan(p[x]));
    }
    Work w;
    w.updates = double(in->nx) * in->ny * kernel->nx * kernel->ny;
    ctx.add_work(w);
    ctx.emit(out_frame, out);
  }

 private:
  void make(const std::string& id, int nx, int ny, int kx, int ky) {
    if (pick(method_, "cpu", id, nx, ny, kx, ky) == Method::direct)
      conv_ = std::make_unique<Direct>(nx, ny, kx, ky);
    else
      conv_ = std::make_unique<Fft>(nx, ny, kx, ky, wisdom_);
  }

  std::string method_, wisdom_;
  bool pinned_ = false, loaded_ = false;
  StreamCheck check_;
  std::unique_ptr<Convolver> conv_;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<PsfConvolveCpu>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::image_psf_convolve
