// image.psf_convolve, cuda backend: Listing 4.1 on device-resident frames, by the methods of the
// cpu backend (stages/image/psf_convolve.cpp), with the same input checks (StreamCheck)
// and method sizes (fft_size, choose_cuda).
//
// direct: each block makes a 32 x 64 tile of the output. The PSF is taken in pieces of 8 rows x 32
// columns; for each piece the block stages the piece and the frame tile it reads (71 x 63 pixels:
// the tile plus the piece's halo, rows and columns wrapped) in shared memory. A thread keeps 8
// outputs of one column in registers; for each PSF column it reads the 8 weights (two broadcast
// float4 loads) and the 15 frame pixels those 8 outputs need, and does 64 multiply-adds. Each
// piece's sum is added to the output's total once, so rounding grows with the number of pieces
// (about kX kY / 256), not with kX kY.
//
// fft: the frame wrap-padded to fft_size on the device, cuFFT R2C, the product with
// the PSF spectrum (conjugated for a correlation, scaled by 1 / (Px Py), made on the device once
// per stream), C2R, and the top-left H x W corner kept: the cpu fft's algorithm, so both agree on
// which pixels equal Listing 4.1's.
//
// Non-finite frame pixels: the kernels that read the frame (the tile loads, the padding) note the
// first one in row-major order in a device word (atomicMin on 2 (y W + x) + [infinite]). A
// one-thread kernel behind the frame's work stores the word into pinned host memory and resets it;
// the host reads it once that kernel has completed: at a later frame when it has, or at the end of
// the stream, so no frame waits for the device.
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <stdexcept>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/cufft_plan.hpp"
#include "stages/image/psf_convolve.hpp"

namespace uvflow::image_psf_convolve {
namespace {

void check(cudaError_t e, const char* what) { device::check(e, "image.psf_convolve (cuda)", what); }

void check_cufft(cufftResult r, const char* what) { device::check_cufft(r, "image.psf_convolve (cuda)", what); }

cudaStream_t raw(const device::Stream& s) { return static_cast<cudaStream_t>(s.native()); }

// i mod n in [0, n), for negative i too.
__device__ __forceinline__ int wrap(int i, int n) {
  const int r = i % n;
  return r < 0 ? r + n : r;
}

constexpr unsigned long long kNoBadPixel = ULLONG_MAX;

// Records frame pixel (x, y) of a frame nx wide if it is not finite; the smallest key wins.
__device__ __forceinline__ void note_pixel(float v, int x, int y, int nx, unsigned long long* bad) {
  if (!isfinite(v)) atomicMin(bad, (static_cast<unsigned long long>(y) * nx + x) * 2 + (isnan(v) ? 0 : 1));
}

// ---------------------------------------------------------------- direct

constexpr int kBX = 32, kBY = 8;             // threads: one warp per row of threads
constexpr int kRY = 8;                       // outputs per thread, one column, kRY consecutive rows
constexpr int kTX = kBX, kTY = kBY * kRY;    // output tile: 32 columns x 64 rows
constexpr int kKC = 8, kKCX = 32;            // PSF piece: 8 rows x 32 columns
constexpr int kTileRows = kTY + kKC - 1;     // 71
constexpr int kTileCols = kTX + kKCX - 1;    // 63: fewer than 2 * kBX, so two columns per thread
static_assert(kTileCols <= 2 * kBX && kKC == 8, "the tile load and the float4 weight loads assume these sizes");

// out[p][q] = sum_{k, l} in[(p - ky/2 + k) mod ny][(q - kx/2 + l) mod nx] * psf[k][l]: Listing 4.1
// with i = p - ky/2, j = q - kx/2.
__global__ void __launch_bounds__(kBX* kBY)
    direct_kernel(const float* __restrict__ in, int nx, int ny, const float* __restrict__ psf, int kx, int ky,
                  float* __restrict__ out, unsigned long long* bad) {
  __shared__ float tile[kTileRows][kTileCols];
  __shared__ float4 weights[kKCX][kKC / 4];  // weights[l] = PSF rows k0 .. k0 + 7 of column l0 + l
  float* w_flat = reinterpret_cast<float*>(weights);

  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kBX + tx;
  const int q0 = blockIdx.x * kTX, p0 = blockIdx.y * kTY;
  float total[kRY];
#pragma unroll
  for (int r = 0; r < kRY; ++r) total[r] = 0.0f;

  for (int k0 = 0; k0 < ky; k0 += kKC)
    for (int l0 = 0; l0 < kx; l0 += kKCX) {
      const int cols = min(kKCX, kx - l0);
      __syncthreads();  // every thread is done with the previous piece
      // The PSF piece, zero past the PSF's last row (the unrolled loops below always do 8 rows).
      for (int i = tid; i < kKCX * kKC; i += kBX * kBY) {
        const int l = i / kKC, k = i % kKC;
        w_flat[i] = (l < cols && k0 + k < ky) ? psf[std::size_t(k0 + k) * kx + l0 + l] : 0.0f;
      }
      // The frame tile: rows p0 - ky/2 + k0 + j, columns q0 - kx/2 + l0 + c, both wrapped. Each
      // thread loads columns tx and tx + 32 of every 8th row.
      const int width = kTX + cols - 1;
      const int c1 = tx + kBX;
      const int x0 = wrap(q0 - kx / 2 + l0 + tx, nx), x1 = wrap(q0 - kx / 2 + l0 + c1, nx);
      for (int j = ty; j < kTileRows; j += kBY) {
        const int y = wrap(p0 - ky / 2 + k0 + j, ny);
        const float* row = in + std::size_t(y) * nx;
        const float v0 = row[x0];
        note_pixel(v0, x0, y, nx, bad);
        tile[j][tx] = v0;
        if (c1 < width) {
          const float v1 = row[x1];
          note_pixel(v1, x1, y, nx, bad);
          tile[j][c1] = v1;
        }
      }
      __syncthreads();

      // Output row ty * 8 + r takes frame tile row ty * 8 + j with PSF row j - r of the piece.
      float acc[kRY];
#pragma unroll
      for (int r = 0; r < kRY; ++r) acc[r] = 0.0f;
      const float* t = &tile[ty * kRY][tx];
      for (int l = 0; l < cols; ++l) {
        const float4 wa = weights[l][0], wb = weights[l][1];
        const float w[kKC] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
        for (int j = 0; j < kRY + kKC - 1; ++j) {
          const float v = t[j * kTileCols + l];
#pragma unroll
          for (int r = 0; r < kRY; ++r)
            if (j - r >= 0 && j - r < kKC) acc[r] = fmaf(v, w[j - r], acc[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < kRY; ++r) total[r] += acc[r];
    }

  const int q = q0 + tx;
  if (q >= nx) return;
#pragma unroll
  for (int r = 0; r < kRY; ++r) {
    const int p = p0 + ty * kRY + r;
    if (p < ny) out[std::size_t(p) * nx + q] = total[r];
  }
}

// ---------------------------------------------------------------- fft

// pad[y][x] = in[(y - ky/2) mod ny][(x - kx/2) mod nx] on the px x py grid: every frame pixel is read
// at least once (px >= nx, py >= ny), so this is also the frame's finiteness check.
__global__ void wrap_pad(const float* __restrict__ in, int nx, int ny, int kx, int ky, float* __restrict__ pad,
                         int px, int py, unsigned long long* bad) {
  for (int y = blockIdx.y; y < py; y += gridDim.y) {
    const int sy = wrap(y - ky / 2, ny);
    const float* row = in + std::size_t(sy) * nx;
    float* dst = pad + std::size_t(y) * px;
    for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < px; x += gridDim.x * blockDim.x) {
      const int sx = wrap(x - kx / 2, nx);
      const float v = row[sx];
      note_pixel(v, sx, sy, nx, bad);
      dst[x] = v;
    }
  }
}

// The PSF at the top-left corner of the zeroed px-wide grid.
__global__ void place_psf(const float* __restrict__ psf, int kx, int ky, float* __restrict__ pad, int px) {
  const std::int64_t n = std::int64_t(kx) * ky;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    pad[(i / kx) * px + i % kx] = psf[i];
}

__global__ void conjugate_and_scale(float2* s, std::int64_t n, float scale) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    s[i] = make_float2(s[i].x * scale, -s[i].y * scale);
}

__global__ void multiply(float2* __restrict__ g, const float2* __restrict__ s, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float2 a = g[i], b = s[i];
    g[i] = make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
  }
}

// out[y][x] = res[y][x] for the frame's ny rows and nx columns of the px-wide result.
__global__ void crop(const float* __restrict__ res, int px, float* __restrict__ out, int nx, int ny) {
  for (int y = blockIdx.y; y < ny; y += gridDim.y)
    for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < nx; x += gridDim.x * blockDim.x)
      out[std::size_t(y) * nx + x] = res[std::size_t(y) * px + x];
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the device, no more.
unsigned flat_blocks(std::int64_t n) {
  static const int max_blocks = 16 * device::multiprocessors();
  return unsigned(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, max_blocks));
}

// Blocks for the row loops (blockIdx.y over rows, x over columns).
dim3 row_blocks(int cols, int rows) {
  return dim3(unsigned(std::min((cols + kThreads - 1) / kThreads, 64)), unsigned(std::min(rows, 65535)));
}

// ---------------------------------------------------------------- methods

// Made for the frame and PSF sizes (in prepare() when they were described: plans and buffers
// exist before the first frame), then given the PSF's values once, at the first frame.
class DeviceConvolver {
 public:
  DeviceConvolver(int nx, int ny, int kx, int ky) : nx_(nx), ny_(ny), kx_(kx), ky_(ky) {}
  virtual ~DeviceConvolver() = default;
  bool made_for(int nx, int ny, int kx, int ky) const { return nx == nx_ && ny == ny_ && kx == kx_ && ky == ky_; }
  // Uploads the PSF (and makes what depends on it) on `s`.
  virtual void load(const Image& psf, const device::Stream& s) = 0;
  // Enqueues one frame on `s`; non-finite frame pixels are noted in *bad.
  virtual void run(const float* in, float* out, unsigned long long* bad, const device::Stream& s) = 0;
  // The scratch and PSF buffers are in use until `e` (they are freed after it).
  virtual void used_until(const device::Event& e) = 0;

 protected:
  int nx_, ny_, kx_, ky_;
};

// The PSF's pixels on the device, copied on `s`.
Array<float> upload(const Image& psf, const device::Stream& s) {
  Array<float> a = psf.pixels;
  a.transfer(Location::device, s, false);
  return a;
}

class Direct : public DeviceConvolver {
 public:
  Direct(int nx, int ny, int kx, int ky) : DeviceConvolver(nx, ny, kx, ky) {}
  void load(const Image& psf, const device::Stream& s) override { psf_ = upload(psf, s); }

  void run(const float* in, float* out, unsigned long long* bad, const device::Stream& s) override {
    const dim3 grid(unsigned((nx_ + kTX - 1) / kTX), unsigned((ny_ + kTY - 1) / kTY)), block(kBX, kBY);
    direct_kernel<<<grid, block, 0, raw(s)>>>(in, nx_, ny_, psf_.data(), kx_, ky_, out, bad);
    device::check_launch("image.psf_convolve: direct_kernel");
  }
  void used_until(const device::Event& e) override { psf_.storage()->set_last_writer(e); }

 private:
  Array<float> psf_;
};

class Fft : public DeviceConvolver {
 public:
  Fft(int nx, int ny, int kx, int ky, const device::Stream& s)
      : DeviceConvolver(nx, ny, kx, ky), px_(fft_size(nx, kx)), py_(fft_size(ny, ky)),
        points_(std::int64_t(py_) * (px_ / 2 + 1)) {
    std::size_t fwd_bytes = 0, inv_bytes = 0;
    check_cufft(cufftMakePlan2d(fwd_.get(), py_, px_, CUFFT_R2C, &fwd_bytes), "cufftMakePlan2d (R2C)");
    check_cufft(cufftMakePlan2d(inv_.get(), py_, px_, CUFFT_C2R, &inv_bytes), "cufftMakePlan2d (C2R)");
    work_ = Array<std::uint8_t>::device(std::max<std::size_t>({fwd_bytes, inv_bytes, 1}), s);
    pad_ = Array<float>::device(std::size_t(py_) * px_, s);
    spectrum_ = Array<cfloat>::device(std::size_t(points_), s);
    psf_spectrum_ = Array<cfloat>::device(std::size_t(points_), s);
    for (const device::FftPlan* p : {&fwd_, &inv_})
      check_cufft(cufftSetWorkArea(p->get(), work_.data()), "cufftSetWorkArea");
  }

  void load(const Image& psf, const device::Stream& s) override {
    on_stream(s);
    // The PSF spectrum, once: the PSF zero-padded to the grid, R2C, conjugated (a correlation) and
    // scaled by 1 / (Px Py) (cuFFT's inverse is unnormalised).
    const Array<float> dpsf = upload(psf, s);
    device::memset_zero(pad_.data(), pad_.bytes(), s);
    place_psf<<<flat_blocks(dpsf.size()), kThreads, 0, raw(s)>>>(dpsf.data(), kx_, ky_, pad_.data(), px_);
    device::check_launch("image.psf_convolve: place_psf");
    check_cufft(cufftExecR2C(fwd_.get(), pad_.data(), as_cufft(psf_spectrum_)), "cufftExecR2C (PSF)");
    conjugate_and_scale<<<flat_blocks(points_), kThreads, 0, raw(s)>>>(
        reinterpret_cast<float2*>(psf_spectrum_.data()), points_, float(1.0 / (double(px_) * double(py_))));
    device::check_launch("image.psf_convolve: conjugate_and_scale");
    dpsf.storage()->set_last_writer(s.record());  // freed once place_psf has read it
  }

  void run(const float* in, float* out, unsigned long long* bad, const device::Stream& s) override {
    on_stream(s);
    wrap_pad<<<row_blocks(px_, py_), kThreads, 0, raw(s)>>>(in, nx_, ny_, kx_, ky_, pad_.data(), px_, py_, bad);
    device::check_launch("image.psf_convolve: wrap_pad");
    check_cufft(cufftExecR2C(fwd_.get(), pad_.data(), as_cufft(spectrum_)), "cufftExecR2C");
    multiply<<<flat_blocks(points_), kThreads, 0, raw(s)>>>(reinterpret_cast<float2*>(spectrum_.data()),
                                                            reinterpret_cast<const float2*>(psf_spectrum_.data()), points_);
    device::check_launch("image.psf_convolve: multiply");
    check_cufft(cufftExecC2R(inv_.get(), as_cufft(spectrum_), pad_.data()), "cufftExecC2R");
    crop<<<row_blocks(nx_, ny_), kThreads, 0, raw(s)>>>(pad_.data(), px_, out, nx_, ny_);
    device::check_launch("image.psf_convolve: crop");
  }

  void used_until(const device::Event& e) override { keep_until(e, {&work_, &pad_, &spectrum_, &psf_spectrum_}); }

 private:
  void on_stream(const device::Stream& s) {
    for (const device::FftPlan* p : {&fwd_, &inv_}) check_cufft(cufftSetStream(p->get(), raw(s)), "cufftSetStream");
  }
  static cufftComplex* as_cufft(const Array<cfloat>& a) { return reinterpret_cast<cufftComplex*>(a.data()); }

  int px_, py_;
  std::int64_t points_;  // complex values of the half spectrum
  // Both share work_, from the stream-ordered pool (device::FftPlan allocates none).
  device::FftPlan fwd_{"image.psf_convolve (cuda)"}, inv_{"image.psf_convolve (cuda)"};
  Array<std::uint8_t> work_;
  Array<float> pad_;  // the padded frame, then the padded result
  Array<cfloat> spectrum_, psf_spectrum_;
};

// ---------------------------------------------------------------- non-finite frame pixels

// Hands the frame's word to the host (a plain store to mapped pinned memory: no copy engine, so
// the stream never queues behind the frames' downloads) and resets it for the next frame.
__global__ void publish(unsigned long long* word, unsigned long long* host_slot) {
  *host_slot = *word;
  *word = kNoBadPixel;
}

// The frames' words: one on the device, reset after each frame, and a ring of kSlots pinned host
// words, each read once its frame's publish has completed.
class NonFiniteCheck {
  static constexpr int kSlots = 64;

 public:
  ~NonFiniteCheck() {
    // The device may still be writing into host_: let it finish before host_ goes.
    if (!pending_.empty()) try {
        pending_.back().published.synchronize();
      } catch (...) {
      }
  }

  // The device word for the next frame, `nx` pixels wide, `item` in the stream.
  unsigned long long* begin(std::int64_t item, int nx, const device::Stream& s) {
    if (word_.empty()) {
      word_ = Array<unsigned long long>::device(1, s);
      check(cudaMemsetAsync(word_.data(), 0xff, sizeof(unsigned long long), raw(s)), "cudaMemsetAsync");
      // Pinned memory is mapped into the device's address space at the same address (unified
      // addressing, every 64-bit CUDA platform), wherever in the pinned reserve it lies.
      host_ = Array<unsigned long long>::host(kSlots, /*pinned=*/true);
    }
    if (pending_.size() == std::size_t(kSlots)) poll_one(true);  // the oldest slot is reused
    current_ = {item, nx, next_++ % kSlots, {}};
    return word_.data();
  }

  // After the frame's kernels: publishes its word. Returns the event that follows all the frame's
  // work.
  device::Event end(const device::Stream& s) {
    publish<<<1, 1, 0, raw(s)>>>(word_.data(), host_.data() + current_.slot);
    device::check_launch("image.psf_convolve: publish");
    current_.published = s.record();
    pending_.push_back(current_);
    word_.storage()->set_last_writer(current_.published);
    return current_.published;
  }

  // Throws for the oldest frame with a non-finite pixel among those whose word has been published
  // (all of them when `wait`).
  void poll(bool wait) {
    while (!pending_.empty() && poll_one(wait)) {
    }
  }

 private:
  struct Frame {
    std::int64_t item;
    int nx, slot;
    device::Event published;
  };

  // Checks the oldest pending frame if its word has been published (waiting for it when `wait`);
  // false when it has not.
  bool poll_one(bool wait) {
    const Frame f = pending_.front();
    if (!wait && !f.published.ready()) return false;
    f.published.synchronize();
    pending_.pop_front();
    const unsigned long long key = host_[std::size_t(f.slot)];
    if (key != kNoBadPixel) {
      const unsigned long long pixel = key / 2;
      throw_non_finite(f.item, int(pixel % unsigned(f.nx)), int(pixel / unsigned(f.nx)), (key & 1) == 0);
    }
    return true;
  }

  Array<unsigned long long> word_, host_;
  std::deque<Frame> pending_;
  Frame current_{};
  int next_ = 0;
};

// ---------------------------------------------------------------- the stage

class PsfConvolveCuda : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { method_ = p.method; }

  void prepare(PrepareContext& pc) override {
    const PortShape &f = pc.input(in_frame), &k = pc.input(psf);
    if (f.sized() && k.sized() && !pc.dry_run) make(pc.id, f.nx, f.ny, k.nx, k.ny, pc.stream);
  }

  void process(Context& ctx) override {
    auto in = ctx.in(in_frame);
    auto kernel = ctx.in(psf);
    check_.check(*in, ctx.item(), *kernel);
    check_on_device(in->pixels, "image.psf_convolve (cuda): frame " + std::to_string(ctx.item()));
    nonfinite_.poll(false);  // earlier frames whose check has landed
    const device::Stream& stream = ctx.stream();
    Work w;
    if (!loaded_) {  // the first frame: the sizes are checked, the PSF is known
      if (!conv_ || !conv_->made_for(in->nx, in->ny, kernel->nx, kernel->ny))
        make(ctx.stage_id(), in->nx, in->ny, kernel->nx, kernel->ny, stream);
      conv_->load(*kernel, stream);
      loaded_ = true;
      // The PSF port is host-resident (it is checked on the host), so the planner moves nothing:
      // the upload is this stage's own, once per stream, and counted here for the report.
      w.bytes_h2d = double(kernel->pixels.bytes());
    }
    auto out = std::make_shared<Image>();
    out->index = in->index;
    out->nx = in->nx;
    out->ny = in->ny;
    out->wcs = in->wcs;
    out->pixels = Array<float>::device(in->pixels.size(), stream);
    unsigned long long* bad = nonfinite_.begin(ctx.item(), in->nx, stream);
    conv_->run(in->pixels.data(), out->pixels.data(), bad, stream);
    conv_->used_until(nonfinite_.end(stream));
    w.updates = double(in->nx) * in->ny * kernel->nx * kernel->ny;
    ctx.add_work(w);
    ctx.emit(out_frame, out);
  }

  // The last frames' checks: the run fails here if one of them had a non-finite pixel.
  void finish(Context&) override { nonfinite_.poll(true); }

 private:
  void make(const std::string& id, int nx, int ny, int kx, int ky, const device::Stream& s) {
    if (pick(method_, "cuda", id, nx, ny, kx, ky) == Method::direct)
      conv_ = std::make_unique<Direct>(nx, ny, kx, ky);
    else
      conv_ = std::make_unique<Fft>(nx, ny, kx, ky, s);
  }

  std::string method_;
  bool loaded_ = false;
  StreamCheck check_;
  NonFiniteCheck nonfinite_;
  std::unique_ptr<DeviceConvolver> conv_;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<PsfConvolveCuda>(); }

}  // namespace uvflow::image_psf_convolve
