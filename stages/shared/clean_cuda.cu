// Hogbom and Clark CLEAN on the device (minor_cycle_cuda.cuh): the peak search, the PSF subtraction,
// Clark's selection of a cycle's pixels and subtraction of its components, and a cycle's figures
// (the robust RMS by radix selection, the model's flux).
#include <cuComplex.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include <cub/cub.cuh>

#include "runtime/cufft_plan.hpp"
#include "stages/shared/minor_cycle_cuda.cuh"

namespace uvflow::clean {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

// A pixel's |value| and index; `abs` -1: none (an empty mask).
struct Peak {
  float abs;
  unsigned long long at;
  float value;
};

// hogbom()'s rule: the larger |value|; of equal ones, the lower index.
__device__ bool better(const Peak& a, const Peak& b) { return a.abs > b.abs || (a.abs == b.abs && a.at < b.at); }

// The block's best of its threads' (each the best of its grid-stride pixels, scanned in increasing
// index with `>`, so the first of equal ones stays), by a tree reduction in shared memory.
__device__ void reduce_block(Peak mine, Peak* out) {
  __shared__ Peak shared[kThreads];
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half && better(shared[threadIdx.x + half], shared[threadIdx.x]))
      shared[threadIdx.x] = shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = shared[0];
}

__global__ void block_peaks(const float* r, const std::uint8_t* mask, unsigned long long n, Peak* partial) {
  Peak best{-1.0f, 0, 0.0f};
  for (unsigned long long k = blockIdx.x * (unsigned long long)kThreads + threadIdx.x; k < n;
       k += (unsigned long long)gridDim.x * kThreads)
    if ((!mask || mask[k]) && fabsf(r[k]) > best.abs) best = {fabsf(r[k]), k, r[k]};
  reduce_block(best, &partial[blockIdx.x]);
}

// One block: the best of the blocks' peaks.
__global__ void final_peak(const Peak* partial, int blocks, Peak* out) {
  Peak best{-1.0f, 0, 0.0f};
  for (int b = threadIdx.x; b < blocks; b += kThreads)
    if (better(partial[b], best)) best = partial[b];
  reduce_block(best, out);
}

// The pixels [x_lo, x_hi) x [y_lo, y_hi) of an nx x ny image that a pnx x pny PSF centred on (x, y)
// (its pixel (pnx/2, pny/2) there) covers.
struct Overlap {
  int x_lo, x_hi, y_lo, y_hi;
  long long pixels() const { return (long long)(x_hi - x_lo) * (y_hi - y_lo); }
};
Overlap overlap(int x, int y, int nx, int ny, int pnx, int pny) {
  return {std::max(0, x - pnx / 2), std::min(nx, x - pnx / 2 + pnx), std::max(0, y - pny / 2), std::min(ny, y - pny / 2 + pny)};
}

// residual -= flux x the PSF centred on (x, y), over the overlap [x_lo, x_hi) x [y_lo, y_hi); one
// thread also adds the component to the model.
__global__ void subtract(float* r, float* model, int nx, const float* psf, int pnx, int x, int y, int pcx, int pcy, int x_lo,
                         int x_hi, int y_lo, int y_hi, float flux) {
  const int w = x_hi - x_lo;
  const long long total = (long long)w * (y_hi - y_lo);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int ix = x_lo + int(i % w), iy = y_lo + int(i / w);
    float& v = r[std::size_t(iy) * std::size_t(nx) + std::size_t(ix)];
    v = fmaf(-flux, psf[std::size_t(iy - y + pcy) * std::size_t(pnx) + std::size_t(ix - x + pcx)], v);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) model[std::size_t(y) * std::size_t(nx) + std::size_t(x)] += flux;
}

// The largest |psf| outside the (2 patch + 1)^2 patch around the centre, as the bits of a
// non-negative float (which order as the floats do): exact whatever the order.
__global__ void sidelobe_max(const float* psf, int pnx, int pny, int patch, unsigned int* out) {
  const int pcx = pnx / 2, pcy = pny / 2;
  unsigned int best = 0;
  const long long total = (long long)pnx * pny;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int x = int(i % pnx), y = int(i / pnx);
    // NaN left out, as clark()'s std::max leaves it out.
    if ((abs(x - pcx) > patch || abs(y - pcy) > patch) && !isnan(psf[i])) best = max(best, __float_as_uint(fabsf(psf[i])));
  }
  atomicMax(out, best);
}

// The PSF's (2 patch + 1)^2 patch around its centre, 0 beyond the PSF.
__global__ void gather_patch(const float* psf, int pnx, int pny, int patch, float* out) {
  const int w = 2 * patch + 1;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < w * w; i += gridDim.x * blockDim.x) {
    const int x = i % w - patch + pnx / 2, y = i / w - patch + pny / 2;
    out[i] = x < 0 || y < 0 || x >= pnx || y >= pny ? 0.0f : psf[std::size_t(y) * std::size_t(pnx) + std::size_t(x)];
  }
}

// clark()'s circular kernel: element (x, y) of the 2nx x 2ny grid holds the PSF at offset (dx, dy),
// dx = x or x - 2nx, 0 beyond the PSF.
__global__ void circular_kernel(const float* psf, int pnx, int pny, int nx, int ny, cuFloatComplex* kernel) {
  const int mx = 2 * nx, my = 2 * ny;
  const long long total = (long long)mx * my;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int x = int(i % mx), y = int(i / mx);
    const int px = (x < nx ? x : x - mx) + pnx / 2, py = (y < ny ? y : y - my) + pny / 2;
    const float v = px < 0 || py < 0 || px >= pnx || py >= pny ? 0.0f : psf[std::size_t(py) * std::size_t(pnx) + std::size_t(px)];
    kernel[i] = make_cuFloatComplex(v, 0.0f);
  }
}

__global__ void multiply(cuFloatComplex* work, const cuFloatComplex* kernel, long long m) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m; i += (long long)gridDim.x * blockDim.x)
    work[i] = cuCmulf(work[i], kernel[i]);
}

// residual -= the real part of the inverse transform, scaled, over the image's corner of the grid.
__global__ void subtract_convolved(float* residual, const cuFloatComplex* work, int nx, int ny, float scale) {
  const long long total = (long long)nx * ny;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int x = int(i % nx), y = int(i / nx);
    residual[i] -= work[std::size_t(y) * std::size_t(2 * nx) + std::size_t(x)].x * scale;
  }
}

// What a selection writes besides its pixels: how many it found (it writes at most its capacity),
// the limit they exceed and, for Clark, the peak that limit comes from. Read back in one copy.
struct SelectHead {
  unsigned long long count;
  double limit;
  float peak;
};

// The pixels within the mask (null: all) whose |value| exceeds head->limit (compared in double, as
// clark_cycle() compares them), in any order: their indices and values.
__global__ void select_above(const float* r, const std::uint8_t* mask, unsigned long long n, SelectHead* head,
                             unsigned long long* at, float* value, unsigned long long capacity) {
  const double limit = head->limit;
  for (unsigned long long k = blockIdx.x * (unsigned long long)kThreads + threadIdx.x; k < n;
       k += (unsigned long long)gridDim.x * kThreads)
    if ((!mask || mask[k]) && double(fabsf(r[k])) > limit) {
      const unsigned long long i = atomicAdd(&head->count, 1ULL);
      if (i < capacity) at[i] = k, value[i] = r[k];
    }
}

constexpr int kTile = 64;

// The largest of the block's threads' `mine` (each a |value| or -1 for none), to every thread.
__device__ float block_max(float mine) {
  for (int o = 16; o > 0; o /= 2) mine = fmaxf(mine, __shfl_down_sync(0xffffffffu, mine, o));
  __shared__ float warp_best[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = mine;
  __syncthreads();
  float best = warp_best[0];
  for (int w = 1; w < kThreads / 32; ++w) best = fmaxf(best, warp_best[w]);
  return best;
}

// The largest |value| within the mask (-1: none; NaN left out, as find_peak leaves it) of each 64 x 64
// tile: a block per tile, tiles_x tiles a row in `out`.
__global__ void tile_maxima(const float* r, const std::uint8_t* mask, int nx, int ny, int tiles_x, float* out) {
  const int tx = int(blockIdx.x) % tiles_x, ty = int(blockIdx.x) / tiles_x;
  float best = -1.0f;
  for (int i = threadIdx.x; i < kTile * kTile; i += kThreads) {
    const int x = tx * kTile + i % kTile, y = ty * kTile + i / kTile;
    if (x >= nx || y >= ny) continue;
    const std::size_t k = std::size_t(y) * std::size_t(nx) + std::size_t(x);
    if ((!mask || mask[k]) && fabsf(r[k]) > best) best = fabsf(r[k]);
  }
  best = block_max(best);
  if (threadIdx.x == 0) out[blockIdx.x] = best;
}

// A Clark cycle's start, on the device: the peak (the largest tile maximum) and clark_limit() of it.
__global__ void clark_peak_and_limit(const float* tile_max, int tiles, double threshold, double cycle_factor,
                                     double sidelobe, SelectHead* head) {
  float best = -1.0f;
  for (int t = threadIdx.x; t < tiles; t += kThreads) best = fmaxf(best, tile_max[t]);
  best = block_max(best);
  if (threadIdx.x == 0) {
    head->peak = best;
    head->limit = clark_limit(threshold, cycle_factor, sidelobe, double(best));
  }
}

// select_above() over the tiles whose maximum exceeds the limit (a block per tile, of all tiles).
__global__ void select_in_tiles(const float* r, const std::uint8_t* mask, int nx, int ny, int tiles_x, const float* tile_max,
                                SelectHead* head, unsigned long long* at, float* value, unsigned long long capacity) {
  const double limit = head->limit;
  if (!(double(tile_max[blockIdx.x]) > limit)) return;
  const int tx = int(blockIdx.x) % tiles_x, ty = int(blockIdx.x) / tiles_x;
  for (int i = threadIdx.x; i < kTile * kTile; i += kThreads) {
    const int x = tx * kTile + i % kTile, y = ty * kTile + i / kTile;
    if (x >= nx || y >= ny) continue;
    const std::size_t k = std::size_t(y) * std::size_t(nx) + std::size_t(x);
    if ((!mask || mask[k]) && double(fabsf(r[k])) > limit) {
      const unsigned long long j = atomicAdd(&head->count, 1ULL);
      if (j < capacity) at[j] = k, value[j] = r[k];
    }
  }
}

// A Clark cycle's component: its pixel and flux.
struct Component {
  int x, y;
  float flux;
};

constexpr int kTilePixelsPerThread = kTile * kTile / kThreads;

// The cycle's components off the residual over the listed tiles (a block per tile: the tiles their
// PSFs overlap), and each tile's maximum renewed. Each pixel takes the components in their order,
// one fma each, as launches of subtract() one by one would, but the residual is read and written
// once. The block lists the components whose PSF reaches its tile (in order, kThreads at a time), so
// that far ones cost a comparison each, not a pass over the pixels.
__global__ void subtract_in_tiles(float* r, const std::uint8_t* mask, int nx, int ny, int tiles_x, const int* tiles,
                                  const float* psf, int pnx, int pny, const Component* comps, int count, float* tile_max) {
  static_assert(kTilePixelsPerThread * kThreads == kTile * kTile);
  __shared__ Component listed[kThreads];
  __shared__ int warp_hits[kThreads / 32];
  const int t = tiles[blockIdx.x], x0 = t % tiles_x * kTile, y0 = t / tiles_x * kTile;
  const int pcx = pnx / 2, pcy = pny / 2, lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  float v[kTilePixelsPerThread];
  for (int j = 0; j < kTilePixelsPerThread; ++j) {
    const int i = int(threadIdx.x) + j * kThreads, x = x0 + i % kTile, y = y0 + i / kTile;
    v[j] = x < nx && y < ny ? r[std::size_t(y) * std::size_t(nx) + std::size_t(x)] : 0.0f;
  }
  for (int c0 = 0; c0 < count; c0 += kThreads) {
    const int c = c0 + int(threadIdx.x);
    Component mine{};
    bool hit = false;
    if (c < count) {
      mine = comps[c];
      hit = mine.x - pcx < x0 + kTile && mine.x - pcx + pnx > x0 && mine.y - pcy < y0 + kTile && mine.y - pcy + pny > y0;
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(int(ballot));
    __syncthreads();
    int before = 0, hits = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      before += w < warp ? warp_hits[w] : 0;
      hits += warp_hits[w];
    }
    if (hit) listed[before + __popc(int(ballot & ((1u << lane) - 1u)))] = mine;
    __syncthreads();
    for (int j = 0; j < kTilePixelsPerThread; ++j) {
      const int i = int(threadIdx.x) + j * kThreads, x = x0 + i % kTile, y = y0 + i / kTile;
      for (int q = 0; q < hits; ++q) {
        const int px = x - listed[q].x + pcx, py = y - listed[q].y + pcy;
        if (px >= 0 && py >= 0 && px < pnx && py < pny)
          v[j] = fmaf(-listed[q].flux, psf[std::size_t(py) * std::size_t(pnx) + std::size_t(px)], v[j]);
      }
    }
    __syncthreads();  // the next chunk's list replaces this one
  }
  float best = -1.0f;
  for (int j = 0; j < kTilePixelsPerThread; ++j) {
    const int i = int(threadIdx.x) + j * kThreads, x = x0 + i % kTile, y = y0 + i / kTile;
    if (x >= nx || y >= ny) continue;
    const std::size_t k = std::size_t(y) * std::size_t(nx) + std::size_t(x);
    r[k] = v[j];
    if ((!mask || mask[k]) && fabsf(v[j]) > best) best = fabsf(v[j]);
  }
  best = block_max(best);
  if (threadIdx.x == 0) tile_max[t] = best;
}

// The components into the model, in their order (a pixel taken twice sums as clark() sums it).
__global__ void add_to_model(float* model, int nx, const Component* comps, int count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int c = 0; c < count; ++c) model[std::size_t(comps[c].y) * std::size_t(nx) + std::size_t(comps[c].x)] += comps[c].flux;
}

// The same onto the zeroed 2nx x 2ny work grid of the FFT convolution.
__global__ void place_on_work(cuFloatComplex* work, int nx, const Component* comps, int count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int c = 0; c < count; ++c) work[std::size_t(comps[c].y) * std::size_t(2 * nx) + std::size_t(comps[c].x)].x += comps[c].flux;
}

// restored += each component's Gaussian over its (2 reach + 1)^2 box within the image (a block per
// component; components of nearby pixels overlap, hence the atomics).
__global__ void add_gaussians(const unsigned long long* at, const float* value, int nx, int ny, int reach, double a, double b,
                              double c, float* restored) {
  const float peak = value[blockIdx.x];
  const int cx = int(at[blockIdx.x] % (unsigned long long)nx), cy = int(at[blockIdx.x] / (unsigned long long)nx);
  const int w = 2 * reach + 1;
  for (int i = threadIdx.x; i < w * w; i += kThreads) {
    const int x = cx + i % w - reach, y = cy + i / w - reach;
    if (x < 0 || y < 0 || x >= nx || y >= ny) continue;
    const double dx = x - cx, dy = y - cy;
    atomicAdd(&restored[std::size_t(y) * std::size_t(nx) + std::size_t(x)],
              float(peak * exp(-(a * dx * dx + 2 * b * dx * dy + c * dy * dy))));
  }
}

// Floats as unsigned keys in the same order (negative ones reversed), and back.
__host__ __device__ unsigned int order_key(float v) {
  unsigned int u;
  memcpy(&u, &v, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
float from_order_key(unsigned int k) {
  const unsigned int u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

constexpr int kRadixBits = 11, kBins = 1 << kRadixBits;

// One pass of a radix selection: the histogram of bits [shift, shift + 11) of the keys whose bits
// under `prefix_mask` are `prefix`, over the finite pixels within the mask, each taken as its value
// or (kDeviation) as float(|value - centre|), robust_rms()'s deviations. A warp's lanes of one bin
// add once (the values of an image crowd into a few bins).
template <bool kDeviation>
__global__ void radix_histogram(const float* r, const std::uint8_t* mask, unsigned long long n, double centre,
                                unsigned int prefix, unsigned int prefix_mask, int shift, unsigned int* hist) {
  __shared__ unsigned int h[kBins];
  for (int i = threadIdx.x; i < kBins; i += kThreads) h[i] = 0;
  __syncthreads();
  const unsigned int lane = threadIdx.x % 32;
  // Whole warps step together, so that every lane reaches __match_any_sync.
  for (unsigned long long k0 = blockIdx.x * (unsigned long long)kThreads + (threadIdx.x - lane); k0 < n;
       k0 += (unsigned long long)gridDim.x * kThreads) {
    const unsigned long long k = k0 + lane;
    bool take = k < n && (!mask || mask[k]) && isfinite(r[k]);
    unsigned int key = 0;
    if (take) {
      key = order_key(kDeviation ? float(fabs(double(r[k]) - centre)) : r[k]);
      take = (key & prefix_mask) == prefix;
    }
    const unsigned int bin = take ? (key >> shift) & (kBins - 1) : kBins;
    const unsigned int peers = __match_any_sync(0xffffffffu, bin);
    if (take && lane == unsigned(__ffs(int(peers)) - 1)) atomicAdd(&h[bin], unsigned(__popc(int(peers))));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBins; i += kThreads)
    if (h[i]) atomicAdd(&hist[i], h[i]);
}

// The peak of |residual| within the mask, as hogbom() finds it.
Peak find_peak(const float* residual, const std::uint8_t* mask, unsigned long long n, const Array<Peak>& partial, int blocks,
               cudaStream_t s, const device::Stream& stream) {
  block_peaks<<<blocks, kThreads, 0, s>>>(residual, mask, n, partial.data());
  device::check_launch("deconv (cuda): block_peaks");
  final_peak<<<1, kThreads, 0, s>>>(partial.data(), blocks, partial.data() + blocks);
  device::check_launch("deconv (cuda): final_peak");
  Peak pk;
  device::check(cudaMemcpyAsync(&pk, partial.data() + blocks, sizeof pk, cudaMemcpyDeviceToHost, s), "deconv (cuda)",
                "read the peak");
  stream.synchronize();
  return pk;
}

// A selection's pixels, sorted by index on the device (CUB's radix sort) and read back through pinned
// memory when they are wanted on the host: the order clark_cycle() and model_flux() take them in. A
// large image's Clark cycles select up to 1e5 pixels hundreds of times; sorting them on the host took
// about as long as the rest of the cycle. The buffers grow to the most pixels a selection has found.
class PixelSelection {
 public:
  PixelSelection(unsigned long long n, const device::Stream& stream)
      : end_bit_(std::max(1, int(std::bit_width(n)))), stream_(stream), s_(static_cast<cudaStream_t>(stream.native())),
        head_(Array<SelectHead>::device(1, stream)) {
    reserve(std::size_t(1) << 16);
  }
  ~PixelSelection() { keep_until(stream_.record(), {&head_, &at_[0], &at_[1], &value_[0], &value_[1], &temp_}); }

  SelectHead* head() const { return head_.data(); }
  // The head zeroed (no pixels, limit 0), enqueued.
  void zero_head() { check(cudaMemsetAsync(head_.data(), 0, sizeof(SelectHead), s_), "reset"); }

  // Runs `launch(at, value, capacity)`, a kernel appending the pixels above head()->limit (set
  // before) and counting them in head()->count, then reads the head back (a wait); where the count
  // exceeds the capacity, the buffers grow and it runs again.
  template <class Launch>
  SelectHead run(Launch&& launch) {
    for (;;) {
      check(cudaMemsetAsync(&head_.data()->count, 0, sizeof(unsigned long long), s_), "reset the count");
      launch(at_[0].data(), value_[0].data(), (unsigned long long)at_[0].size());
      device::check_launch(kWho);
      check(cudaMemcpyAsync(&head_host_, head_.data(), sizeof(SelectHead), cudaMemcpyDeviceToHost, s_), "read the count");
      stream_.synchronize();
      if (head_host_.count <= at_[0].size()) return head_host_;
      reserve(std::size_t(head_host_.count));  // the stream is idle: the old buffers may go
    }
  }

  // The last run()'s pixels, in increasing index (a second wait).
  void read(std::vector<std::size_t>& at, std::vector<float>& value) {
    const std::size_t c = std::size_t(head_host_.count);
    at.resize(c);
    value.resize(c);
    if (c == 0) return;
    if (at_host_.size() < c) {  // pinned only for a selection read back (restore_cuda reads none)
      at_host_ = Array<unsigned long long>::host(at_[0].size(), true);
      value_host_ = Array<float>::host(at_[0].size(), true);
    }
    cub::DoubleBuffer<unsigned long long> keys(at_[0].data(), at_[1].data());
    cub::DoubleBuffer<float> values(value_[0].data(), value_[1].data());
    std::size_t bytes = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, values, int(c), 0, end_bit_, s_), "radix sort size");
    if (bytes > temp_.size()) temp_ = Array<std::uint8_t>::device(bytes, stream_);  // the stream is idle
    check(cub::DeviceRadixSort::SortPairs(temp_.data(), bytes, keys, values, int(c), 0, end_bit_, s_), "radix sort");
    check(cudaMemcpyAsync(at_host_.data(), keys.Current(), c * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s_),
          "read back");
    check(cudaMemcpyAsync(value_host_.data(), values.Current(), c * sizeof(float), cudaMemcpyDeviceToHost, s_), "read back");
    stream_.synchronize();
    std::copy(at_host_.data(), at_host_.data() + c, at.begin());
    std::copy(value_host_.data(), value_host_.data() + c, value.begin());
  }

  // The last run()'s pixels on the device, in any order (before the next read()).
  const unsigned long long* device_at() const { return at_[0].data(); }
  const float* device_value() const { return value_[0].data(); }

 private:
  static constexpr const char* kWho = "deconv (cuda): select pixels";
  static void check(cudaError_t e, const char* what) { device::check(e, kWho, what); }
  void reserve(std::size_t c) {
    for (int b = 0; b < 2; ++b) {
      at_[b] = Array<unsigned long long>::device(c, stream_);
      value_[b] = Array<float>::device(c, stream_);
    }
  }

  int end_bit_;
  const device::Stream& stream_;
  cudaStream_t s_;
  Array<SelectHead> head_;
  SelectHead head_host_{};  // the count is read with a wait right after: pageable is as fast
  Array<unsigned long long> at_[2], at_host_;
  Array<float> value_[2], value_host_;
  Array<std::uint8_t> temp_ = Array<std::uint8_t>::device(0, stream_);
};

// The pixels within the mask whose |value| exceeds 0, selected over the whole image.
SelectHead select_pixels(PixelSelection& selection, const float* r, const std::uint8_t* mask, unsigned long long n,
                         int blocks, cudaStream_t s) {
  selection.zero_head();
  return selection.run([&](unsigned long long* at, float* value, unsigned long long capacity) {
    select_above<<<blocks, kThreads, 0, s>>>(r, mask, n, selection.head(), at, value, capacity);
  });
}

// robust_rms()'s median of the values radix_histogram takes: the one at total / 2 in increasing order,
// by three passes of 11, 11 and 10 bits (exact: the value itself, not an estimate); 0 when there is
// none (`total`: how many there are).
float median_of(bool deviation, const float* r, const std::uint8_t* mask, unsigned long long n, double centre,
                unsigned long long& total, int blocks, cudaStream_t s, const device::Stream& stream) {
  const char* who = "deconv (cuda): robust RMS";
  auto hist_dev = Array<unsigned int>::device(kBins, stream);
  std::vector<unsigned int> hist(kBins);
  unsigned int prefix = 0, prefix_mask = 0;
  unsigned long long k = 0;
  total = 0;
  for (int shift : {32 - kRadixBits, 32 - 2 * kRadixBits, 0}) {
    device::check(cudaMemsetAsync(hist_dev.data(), 0, kBins * sizeof(unsigned int), s), who, "reset");
    if (deviation)
      radix_histogram<true><<<blocks, kThreads, 0, s>>>(r, mask, n, centre, prefix, prefix_mask, shift, hist_dev.data());
    else
      radix_histogram<false><<<blocks, kThreads, 0, s>>>(r, mask, n, centre, prefix, prefix_mask, shift, hist_dev.data());
    device::check_launch(who);
    device::check(cudaMemcpyAsync(hist.data(), hist_dev.data(), kBins * sizeof(unsigned int), cudaMemcpyDeviceToHost, s), who,
                  "read the histogram");
    stream.synchronize();
    if (prefix_mask == 0) {
      for (unsigned int h : hist) total += h;
      if (total == 0) break;
      k = total / 2;
    }
    unsigned int bin = 0;
    for (; k >= hist[bin]; ++bin) k -= hist[bin];
    prefix |= bin << shift;
    prefix_mask |= unsigned(kBins - 1) << shift;
  }
  keep_until(stream.record(), {&hist_dev});
  return total == 0 ? 0.0f : from_order_key(prefix);
}

int grid_blocks(long long work) { return int(std::clamp<long long>((work + kThreads - 1) / kThreads, 1, 4 * kMaxBlocks)); }

}  // namespace

MinorCycle hogbom_cuda(float* residual, float* model, int nx, int ny, const float* psf, int pnx, int pny, double p0,
                       const std::uint8_t* mask, double gain, std::int64_t niter, double threshold,
                       const std::function<bool()>& cancelled, const device::Stream& stream) {
  auto s = static_cast<cudaStream_t>(stream.native());
  const unsigned long long n = (unsigned long long)nx * (unsigned long long)ny;
  const int blocks = int(std::min<unsigned long long>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  auto partial = Array<Peak>::device(std::size_t(blocks) + 1, stream);  // the last: the result
  const int pcx = pnx / 2, pcy = pny / 2;
  MinorCycle out;
  double cleaned = 0;
  out.stop = "niter";
  for (;;) {
    const Peak pk = find_peak(residual, mask, n, partial, blocks, s, stream);
    if (minor_cycle_done(out, pk.abs, threshold, niter, cancelled)) break;
    const int x = int(pk.at % (unsigned long long)nx), y = int(pk.at / (unsigned long long)nx);
    const double peak = pk.value;
    const float flux = float(gain * peak / p0);
    cleaned += flux;
    out.components.push_back({x, y, flux, peak, cleaned});
    const Overlap o = overlap(x, y, nx, ny, pnx, pny);
    subtract<<<grid_blocks(o.pixels()), kThreads, 0, s>>>(residual, model, nx, psf, pnx, x, y, pcx, pcy, o.x_lo, o.x_hi, o.y_lo,
                                                          o.y_hi, flux);
    device::check_launch("deconv (cuda): subtract");
  }
  keep_until(stream.record(), {&partial});
  return out;
}

namespace {

// Clark's subtraction by FFT convolution, as clark() does it: the whole PSF as a circular 2nx x 2ny
// kernel, transformed once; per cycle the components placed on the zeroed grid, transformed,
// multiplied, transformed back and subtracted.
class FftSubtraction {
 public:
  FftSubtraction(const float* psf, int pnx, int pny, int nx, int ny, const device::Stream& stream)
      : nx_(nx), ny_(ny), m_((long long)(2 * nx) * (2 * ny)), stream_(stream),
        kernel_(Array<cuFloatComplex>::device(std::size_t(m_), stream)),
        work_(Array<cuFloatComplex>::device(std::size_t(m_), stream)) {
    auto s = static_cast<cudaStream_t>(stream.native());
    std::size_t work_bytes = 0;
    device::check_cufft(cufftMakePlan2d(plan_.get(), 2 * ny, 2 * nx, CUFFT_C2C, &work_bytes), kWho, "cufftMakePlan2d");
    scratch_ = Array<char>::device(std::max<std::size_t>(work_bytes, 1), stream);
    device::check_cufft(cufftSetStream(plan_.get(), s), kWho, "cufftSetStream");
    device::check_cufft(cufftSetWorkArea(plan_.get(), scratch_.data()), kWho, "cufftSetWorkArea");
    circular_kernel<<<grid_blocks(m_), kThreads, 0, s>>>(psf, pnx, pny, nx, ny, kernel_.data());
    device::check_launch("deconv.clark: circular_kernel");
    device::check_cufft(cufftExecC2C(plan_.get(), kernel_.data(), kernel_.data(), CUFFT_FORWARD), kWho, "cufftExecC2C");
  }
  ~FftSubtraction() { keep_until(stream_.record(), {&kernel_, &work_, &scratch_}); }

  // residual -= the `count` components (on the device) convolved with the whole PSF, enqueued.
  void subtract(float* residual, const Component* comps, int count) {
    auto s = static_cast<cudaStream_t>(stream_.native());
    device::check(cudaMemsetAsync(work_.data(), 0, std::size_t(m_) * sizeof(cuFloatComplex), s), kWho, "zero the work grid");
    place_on_work<<<1, 1, 0, s>>>(work_.data(), nx_, comps, count);
    device::check_launch("deconv.clark: place_on_work");
    device::check_cufft(cufftExecC2C(plan_.get(), work_.data(), work_.data(), CUFFT_FORWARD), kWho, "cufftExecC2C");
    multiply<<<grid_blocks(m_), kThreads, 0, s>>>(work_.data(), kernel_.data(), m_);
    device::check_launch("deconv.clark: multiply");
    device::check_cufft(cufftExecC2C(plan_.get(), work_.data(), work_.data(), CUFFT_INVERSE), kWho, "cufftExecC2C");
    subtract_convolved<<<grid_blocks((long long)nx_ * ny_), kThreads, 0, s>>>(residual, work_.data(), nx_, ny_,
                                                                                1.0f / float(m_));
    device::check_launch("deconv.clark: subtract_convolved");
  }

 private:
  static constexpr const char* kWho = "deconv.clark (cuda)";
  int nx_, ny_;
  long long m_;
  const device::Stream& stream_;
  device::FftPlan plan_{kWho};
  Array<cuFloatComplex> kernel_, work_;
  Array<char> scratch_;
};

// The residual's peak |value| per 64 x 64 tile, kept up to date where a cycle's subtraction changed
// it: each Clark cycle's peak, limit and pixels above it come from the tiles on the device, reading
// only the tiles that can hold such pixels (two passes over a 15000^2 image would read 1.8 GB), with
// one wait for the peak and the count and one for the sorted pixels.
class ClarkTiles {
 public:
  ClarkTiles(float* r, const std::uint8_t* mask, int nx, int ny, const device::Stream& stream)
      : r_(r), mask_(mask), nx_(nx), ny_(ny), tiles_x_((nx + kTile - 1) / kTile), tiles_y_((ny + kTile - 1) / kTile),
        stream_(stream), s_(static_cast<cudaStream_t>(stream.native())),
        max_(Array<float>::device(std::size_t(tiles_x_) * std::size_t(tiles_y_), stream)),
        list_(Array<int>::device(max_.size(), stream)), list_host_(Array<int>::host(max_.size(), true)),
        hit_(max_.size(), 0) {
    renew_all();
  }
  ~ClarkTiles() { keep_until(stream_.record(), {&max_, &list_, &comps_}); }

  // Every tile's maximum (the residual changed everywhere), enqueued.
  void renew_all() {
    tile_maxima<<<tiles_x_ * tiles_y_, kThreads, 0, s_>>>(r_, mask_, nx_, ny_, tiles_x_, max_.data());
    device::check_launch("deconv.clark: tile_maxima");
  }

  // The cycle's peak and limit (clark_limit()) and the count of pixels above the limit, after one
  // wait; `selection` then reads them.
  SelectHead select(PixelSelection& selection, double threshold, double cycle_factor, double sidelobe) {
    clark_peak_and_limit<<<1, kThreads, 0, s_>>>(max_.data(), int(max_.size()), threshold, cycle_factor, sidelobe,
                                                 selection.head());
    device::check_launch("deconv.clark: clark_peak_and_limit");
    return selection.run([&](unsigned long long* at, float* value, unsigned long long capacity) {
      select_in_tiles<<<unsigned(max_.size()), kThreads, 0, s_>>>(r_, mask_, nx_, ny_, tiles_x_, max_.data(), selection.head(),
                                                                  at, value, capacity);
    });
  }

  // The components at pixels `at` with `fluxes` (in order) into the model and off the residual with
  // the whole PSF: by `fft` when given (every tile renewed), else directly over the tiles their PSFs
  // touch (those renewed). Enqueued: the uploads are from pinned buffers that the next select()'s
  // wait frees.
  void subtract(const std::vector<std::size_t>& at, const std::vector<float>& fluxes, const float* psf, int pnx, int pny,
                float* model, FftSubtraction* fft) {
    if (comps_host_.size() < at.size()) {
      comps_host_ = Array<Component>::host(at.size(), true);
      comps_ = Array<Component>::device(at.size(), stream_);
    }
    for (std::size_t i = 0; i < at.size(); ++i)
      comps_host_[i] = {int(at[i] % std::size_t(nx_)), int(at[i] / std::size_t(nx_)), fluxes[i]};
    device::check(cudaMemcpyAsync(comps_.data(), comps_host_.data(), at.size() * sizeof(Component), cudaMemcpyHostToDevice, s_),
                  kWho, "upload the components");
    add_to_model<<<1, 1, 0, s_>>>(model, nx_, comps_.data(), int(at.size()));
    device::check_launch("deconv.clark: add_to_model");
    if (fft) {
      fft->subtract(r_, comps_.data(), int(at.size()));
      renew_all();
      return;
    }
    std::size_t tiles = 0;
    for (std::size_t i = 0; i < at.size(); ++i) {
      const Overlap o = overlap(comps_host_[i].x, comps_host_[i].y, nx_, ny_, pnx, pny);
      for (int ty = o.y_lo / kTile; ty <= (o.y_hi - 1) / kTile; ++ty)
        for (int tx = o.x_lo / kTile; tx <= (o.x_hi - 1) / kTile; ++tx) {
          const std::size_t t = std::size_t(ty) * std::size_t(tiles_x_) + std::size_t(tx);
          if (!hit_[t]) hit_[t] = 1, list_host_[tiles++] = int(t);
        }
    }
    for (std::size_t i = 0; i < tiles; ++i) hit_[std::size_t(list_host_[i])] = 0;
    if (tiles == 0) return;
    device::check(cudaMemcpyAsync(list_.data(), list_host_.data(), tiles * sizeof(int), cudaMemcpyHostToDevice, s_), kWho,
                  "upload the tiles");
    subtract_in_tiles<<<unsigned(tiles), kThreads, 0, s_>>>(r_, mask_, nx_, ny_, tiles_x_, list_.data(), psf, pnx, pny,
                                                             comps_.data(), int(at.size()), max_.data());
    device::check_launch("deconv.clark: subtract_in_tiles");
  }

 private:
  static constexpr const char* kWho = "deconv.clark (cuda)";
  float* r_;
  const std::uint8_t* mask_;
  int nx_, ny_, tiles_x_, tiles_y_;
  const device::Stream& stream_;
  cudaStream_t s_;
  Array<float> max_;
  Array<int> list_, list_host_;
  Array<Component> comps_ = Array<Component>::device(0, stream_), comps_host_ = Array<Component>::host(0, true);
  std::vector<std::uint8_t> hit_;  // the tiles listed so far by subtract(), 0 again when it returns
};

// The direct subtraction reads the PSF over each component's overlap with the image (4 bytes a pixel,
// mostly from L2) and reads and writes the residual once over their union; the FFT convolution moves
// about 100 bytes per element of its 2nx x 2ny grid (the zeroing, two transforms of several passes,
// the product, the read of the real part). Direct while the overlaps' pixels are at most this many
// times the grid's elements.
constexpr double kDirectPerFftElement = 25;

}  // namespace

MinorCycle clark_cuda(float* residual, float* model, int nx, int ny, const float* psf, int pnx, int pny, double p0,
                      const std::uint8_t* mask, double gain, std::int64_t niter, double threshold, int psf_patch,
                      double cycle_factor, const std::string& where, const std::function<bool()>& cancelled,
                      const device::Stream& stream) {
  const char* who = "deconv.clark (cuda)";
  auto s = static_cast<cudaStream_t>(stream.native());
  const unsigned long long n = (unsigned long long)nx * (unsigned long long)ny;
  // The largest sidelobe outside the patch, and the patch itself for the host's patch cycles.
  auto bits = Array<unsigned int>::device(1, stream);
  const int w = 2 * psf_patch + 1;
  auto patch_dev = Array<float>::device(std::size_t(w) * std::size_t(w), stream);
  device::check(cudaMemsetAsync(bits.data(), 0, sizeof(unsigned int), s), who, "reset");
  sidelobe_max<<<grid_blocks((long long)pnx * pny), kThreads, 0, s>>>(psf, pnx, pny, psf_patch, bits.data());
  device::check_launch("deconv.clark: sidelobe_max");
  gather_patch<<<grid_blocks((long long)w * w), kThreads, 0, s>>>(psf, pnx, pny, psf_patch, patch_dev.data());
  device::check_launch("deconv.clark: gather_patch");
  unsigned int sidelobe_bits = 0;
  std::vector<float> patch(std::size_t(w) * std::size_t(w));
  device::check(cudaMemcpyAsync(&sidelobe_bits, bits.data(), sizeof sidelobe_bits, cudaMemcpyDeviceToHost, s), who, "read back");
  device::check(cudaMemcpyAsync(patch.data(), patch_dev.data(), patch.size() * sizeof(float), cudaMemcpyDeviceToHost, s), who,
                "read back");
  stream.synchronize();
  float largest;
  std::memcpy(&largest, &sidelobe_bits, sizeof largest);
  const double sidelobe = double(largest) / p0;  // = clark()'s max of |psf| / p0: the division is monotonic
  if (sidelobe >= 1)
    throw InputError(where + ": the PSF reaches " + std::to_string(sidelobe) + " of its centre outside the " +
                     std::to_string(w) + "-pixel patch: give a larger psf_patch");

  const double fft_elements = 4.0 * double(n);
  std::optional<FftSubtraction> fft;  // made when a cycle first needs it (14 GB for a 15000^2 image)
  MinorCycle out;
  out.stop = "niter";
  double cleaned = 0;
  std::vector<std::size_t> at, active;
  std::vector<float> fluxes, value;
  // Where the host's time goes (MinorCycle::detail): selection and read-back (with the waits for the
  // device's subtraction before it), patch cycles, subtraction.
  using Clock = std::chrono::steady_clock;
  double select_s = 0, patch_s = 0, subtract_s = 0;
  std::size_t cycles = 0, selected_most = 0, direct_cycles = 0;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  ClarkTiles tiles(residual, mask, nx, ny, stream);
  PixelSelection selection(n, stream);
  for (;;) {
    auto t = Clock::now();
    const SelectHead head = tiles.select(selection, threshold, cycle_factor, sidelobe);
    select_s += since(t);
    if (minor_cycle_done(out, head.peak, threshold, niter, cancelled)) break;
    // The cycle's pixels, selected on the device, and its patch cycle on the host by clark()'s code.
    t = Clock::now();
    selection.read(active, value);
    select_s += since(t);
    t = Clock::now();
    clark_patch_cycle(active, value, nx, head.limit, sidelobe, gain, p0, niter, patch, psf_patch, out, cleaned, at, fluxes);
    patch_s += since(t);
    ++cycles;
    selected_most = std::max(selected_most, active.size());
    t = Clock::now();
    // The cycle's components off the whole residual: directly over their overlaps with the PSF, or by
    // the FFT convolution where that moves less memory.
    double direct = 0;
    for (std::size_t k : at) direct += double(overlap(int(k % std::size_t(nx)), int(k / std::size_t(nx)), nx, ny, pnx, pny).pixels());
    const bool by_fft = direct > kDirectPerFftElement * fft_elements;
    if (by_fft && !fft) fft.emplace(psf, pnx, pny, nx, ny, stream);
    direct_cycles += !by_fft;
    tiles.subtract(at, fluxes, psf, pnx, pny, model, by_fft ? &*fft : nullptr);
    subtract_s += since(t);
  }
  char note[200];
  std::snprintf(note, sizeof note,
                "%zu Clark cycles (%zu subtracted directly), at most %zu pixels selected; host time %.1f ms selecting, "
                "%.1f ms in patch cycles, %.1f ms subtracting",
                cycles, direct_cycles, selected_most, select_s * 1e3, patch_s * 1e3, subtract_s * 1e3);
  out.detail = note;
  keep_until(stream.record(), {&bits, &patch_dev});
  return out;
}

StartFigures start_figures_cuda(const float* dirty, const std::uint8_t* mask, std::size_t n, const device::Stream& stream) {
  auto s = static_cast<cudaStream_t>(stream.native());
  const int blocks = int(std::min<unsigned long long>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  auto partial = Array<Peak>::device(std::size_t(blocks) + 1, stream);
  StartFigures f;
  f.peak = std::max(0.0, double(find_peak(dirty, mask, n, partial, blocks, s, stream).abs));
  keep_until(stream.record(), {&partial});
  // robust_rms(): 1.4826 x the median of |value - median| over the finite pixels within the mask, the
  // medians the elements at size / 2 in order.
  unsigned long long total = 0;
  const double median = median_of(false, dirty, mask, n, 0, total, blocks, s, stream);
  if (total > 0) f.noise = 1.4826 * double(median_of(true, dirty, mask, n, median, total, blocks, s, stream));
  return f;
}

double model_flux_cuda(const float* model, std::size_t n, const device::Stream& stream) {
  auto s = static_cast<cudaStream_t>(stream.native());
  const int blocks = int(std::min<unsigned long long>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  // The non-zero pixels, summed in pixel order: model_flux()'s sum (its zeros add nothing).
  PixelSelection selection(n, stream);
  select_pixels(selection, model, nullptr, n, blocks, s);
  std::vector<std::size_t> at;
  std::vector<float> value;
  selection.read(at, value);
  double sum = 0;
  for (float v : value) sum += v;
  return sum;
}

void restore_cuda(const float* model, const float* residual, float* restored, int nx, int ny, const Gaussian& g,
                  const device::Stream& stream) {
  auto s = static_cast<cudaStream_t>(stream.native());
  const std::size_t n = std::size_t(nx) * std::size_t(ny);
  const int blocks = int(std::min<unsigned long long>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  device::check(cudaMemcpyAsync(restored, residual, n * sizeof(float), cudaMemcpyDeviceToDevice, s), "deconv.restore (cuda)",
                "copy the residual");
  // The components: the model's non-zero pixels, left on the device by the selection.
  PixelSelection selection(n, stream);
  const std::size_t comps = std::size_t(select_pixels(selection, model, nullptr, n, blocks, s).count);
  // restore()'s reach: where the Gaussian falls below 1e-7 of its peak along its major axis.
  const double lmin = (g.a + g.c) / 2 - std::hypot((g.a - g.c) / 2, g.b);
  const int reach = int(std::ceil(std::sqrt(std::log(1e7) / lmin)));
  if (comps > 0) {
    add_gaussians<<<unsigned(comps), kThreads, 0, s>>>(selection.device_at(), selection.device_value(), nx, ny, reach, g.a,
                                                       g.b, g.c, restored);
    device::check_launch("deconv.restore: add_gaussians");
  }
}

}  // namespace uvflow::clean
