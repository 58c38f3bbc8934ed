// grid.wstack, cuda backend: the cpu backend's method (stages/shared/wstack.hpp) on the device.
// Each block's u, v, w and weight x visibility are appended to device staging arrays as it arrives
// (with the weight sum, the |w| range and max |v|, reduced per warp). At the end of the stream
// those are read back (the plane count and the band of grid rows that hold data are host loop
// bounds), the visibilities are sorted by (first plane, 32 x 32 tile of their first cell), runs of
// one key with enough visibilities become items, and where each first plane starts comes back (a
// second wait: two per run). Per w-plane: zero the band, spread the items' visibilities through
// shared-memory tiles (in fixed point: TileCell) and the others with one global atomic per cell (at
// epsilon 1e-5 and below into a double band, as on the cpu), the pruned FFT (wstack_cuda.cuh: band
// rows, then the image's columns only), multiply by the plane's screen and add the real part into a
// double image. Last the image-domain factors and 1 / sum of weights. Tested against the cpu
// backend (tests/gpu_wstack_test.cpp).
#include <cuda_runtime.h>
#include <cufft.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cuda_check.hpp"
#include "runtime/cufft_plan.hpp"
#include "runtime/error.hpp"
#include "stages/grid/wstack.hpp"
#include "stages/shared/sky_wcs.hpp"
#include "stages/shared/vis_checks.hpp"
#include "stages/shared/wstack_cuda.cuh"

namespace uvflow::grid_wstack {
namespace {

constexpr char kWho[] = "grid.wstack (cuda)";
using wstack::cuda::DevicePlan;
constexpr int kTile = 32;  // cells a side of the sort's tiles
// From this epsilon up the planes' image sum is kept in float and their screens' phases are taken
// in float (accumulate): the rounding (about 6e-8 of each plane's term, amplified at the corners by
// the correction that es::choose bounds for the single-precision FFTs) is then far below epsilon;
// below it, double.
constexpr double kFloatSum = 1e-3;

// stats: [sum of weights, count of visibilities with a non-finite uvw, or a non-finite value or
// weight where the weight is not 0 (one would make its item's fixed-point scale meaningless, see
// TileCell)]; range: [min |w| bits, max |w| bits, max |v| bits] (non-negative floats order as
// their bit patterns do).
__global__ void append(const float* uu, const float* vv, const float* ww, const float2* vis, const float* weight,
                       std::int64_t n, float* u, float* v, float* w, float2* c, double* stats, unsigned* range) {
  // Per thread, then per warp, then one atomic per warp (one per visibility contended on 3 words).
  double sum = 0, bad = 0;
  unsigned lo = 0x7f800000u, hi = 0, vmax = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float wt = weight[i];
    u[i] = uu[i], v[i] = vv[i], w[i] = ww[i];
    // A visibility of weight 0 adds nothing, whatever its value (0 x NaN would be NaN).
    c[i] = wt != 0 ? make_float2(vis[i].x * wt, vis[i].y * wt) : make_float2(0, 0);
    if (!isfinite(uu[i]) || !isfinite(vv[i]) || !isfinite(ww[i]) ||
        (wt != 0 && !(isfinite(wt) && isfinite(vis[i].x) && isfinite(vis[i].y))))
      bad += 1;
    if (wt != 0) {
      sum += wt;
      const unsigned bits = __float_as_uint(fabsf(ww[i]));
      lo = min(lo, bits), hi = max(hi, bits), vmax = max(vmax, __float_as_uint(fabsf(vv[i])));
    }
  }
  for (int d = 16; d > 0; d /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, d), bad += __shfl_down_sync(0xffffffffu, bad, d);
    lo = min(lo, __shfl_down_sync(0xffffffffu, lo, d)), hi = max(hi, __shfl_down_sync(0xffffffffu, hi, d));
    vmax = max(vmax, __shfl_down_sync(0xffffffffu, vmax, d));
  }
  if (threadIdx.x % 32 == 0) {
    if (sum != 0) atomicAdd(stats, sum);
    if (bad != 0) atomicAdd(stats + 1, bad);
    atomicMin(range, lo), atomicMax(range + 1, hi), atomicMax(range + 2, vmax);
  }
}

// The sort key of each visibility: its first plane, then the kTile x kTile tile of the grid (in
// the centred layout of wstack_cuda.cuh) that holds its first cell, so that the visibilities of
// one tile can be gridded together; and its index.
__global__ void sort_keys(DevicePlan p, int tiles_side, const float* u, const float* v, const float* w, std::int64_t n,
                          std::uint32_t* key, std::int32_t* index) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const bool flip = w[i] < 0;
    const double s = (fabs(double(w[i])) - p.w0) / p.dw;
    int p0 = int(ceil(s - p.support / 2.0));
    p0 = p0 < 0 ? 0 : (p0 > p.planes - p.support ? p.planes - p.support : p0);
    const double gu = (flip ? -double(u[i]) : double(u[i])) * p.scale, gv = (flip ? -double(v[i]) : double(v[i])) * p.scale;
    const int row = wstack::cuda::wrap(int(ceil(gv - p.support / 2.0)) + p.ng / 2, p.ng);
    const int col = wstack::cuda::wrap(int(ceil(gu - p.support / 2.0)) + p.ng / 2, p.ng);
    key[i] = std::uint32_t(p0) * std::uint32_t(tiles_side * tiles_side) + std::uint32_t((row / kTile) * tiles_side + col / kTile);
    index[i] = std::int32_t(i);
  }
}

__device__ inline std::uint32_t key_of(std::uint32_t key) { return key; }

// first[k] = the first of the n sorted keys at or above k * tiles (k = 0 .. planes): where each
// first plane's visibilities (or items) start.
template <class K>
__global__ void plane_starts(const K* sorted, std::int64_t n, int planes, std::uint32_t tiles, std::int64_t* first) {
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k <= planes; k += gridDim.x * blockDim.x) {
    const std::uint64_t target = std::uint64_t(k) * tiles;
    std::int64_t a = 0, b = n;
    while (a < b) {
      const std::int64_t m = (a + b) / 2;
      if (std::uint64_t(key_of(sorted[m])) < target) a = m + 1;
      else b = m;
    }
    first[k] = a;
  }
}

// The visibilities in sorted order, flipped to w >= 0 (u, v and the visibility's imaginary part
// negated where w < 0).
__global__ void permute(const std::int32_t* order, const float* u, const float* v, const float* w, const float2* c,
                        std::int64_t n, float* su, float* sv, float* sw, float2* sc) {
  for (std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; j < n; j += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int32_t i = order[j];
    const bool flip = w[i] < 0;
    su[j] = flip ? -u[i] : u[i], sv[j] = flip ? -v[i] : v[i], sw[j] = fabsf(w[i]);
    sc[j] = flip ? make_float2(c[i].x, -c[i].y) : c[i];
  }
}

__device__ inline void add_cell(float* cell, double re, double im) { atomicAdd(reinterpret_cast<float2*>(cell), make_float2(float(re), float(im))); }
__device__ inline void add_cell(double* cell, double re, double im) { atomicAdd(cell, re), atomicAdd(cell + 1, im); }

// One sorted visibility's part in `plane`: its value times exp(-2 pi i |w| t0) and the w-kernel,
// its first cells (u, v: unwrapped) and the taps. False when it adds nothing to the plane.
struct Spread {
  double re, im;
  int fu, fv;
  double ku[es::kMaxSupport], kv[es::kMaxSupport];
};
// kW: the support as a compile-time constant (0: p.support at run time), so that the taps of the
// usual supports are unrolled into registers instead of a local-memory array (280 bytes of stack
// per thread, every tap a local load).
template <int kW>
__device__ inline bool prepare(const DevicePlan& p, int plane, float u, float v, float w, float2 c, Spread& s) {
  const int W = kW > 0 ? kW : p.support;
  if (c.x == 0 && c.y == 0) return false;
  const double kw = wstack::cuda::plane_weight(p, w, plane);
  if (kw == 0) return false;
  double sn, cs;
  sincospi(-2 * double(w) * p.t0, &sn, &cs);
  s.re = (c.x * cs - c.y * sn) * kw, s.im = (c.x * sn + c.y * cs) * kw;
  s.fu = wstack::cuda::axis_taps(p, W, double(u) * p.scale, s.ku), s.fv = wstack::cuda::axis_taps(p, W, double(v) * p.scale, s.kv);
  return true;
}

// A chunk of at most kChunk sorted visibilities sharing one key (first plane, tile).
struct Item {
  std::int32_t start, count;
  std::uint32_t key;
};
__device__ inline std::uint32_t key_of(const Item& item) { return item.key; }
constexpr int kChunk = 2048;

// How a shared-memory tile adds for a grid of T. A float atomicAdd on shared memory is a
// compare-and-swap loop on sm_90 (ATOMS.CAST.SPIN, retried under contention), a 32-bit integer one
// a single ATOMS.ADD: the float grid's tiles add in fixed point (measured in
// bench/results/h100_wstack.md, stop 29). Each item's contributions are scaled by 2^e, the largest
// power of two that keeps the item's sum of |visibility| (a bound on any cell's sum of
// |contribution|: taps and w-weights are at most 1) below 2^30, so no cell overflows 2^31, and each
// contribution is rounded to 2^-e, at most 2^-29 of that sum. The sums are exact and so independent
// of the order of the atomics. The double grid (epsilon 1e-5 and below) keeps double tiles.
template <class T>
using TileCell = std::conditional_t<std::is_same_v<T, float>, int, double>;
__device__ inline void add_tile(int* cell, double re, double im, float scale) {
  atomicAdd(cell, __float2int_rn(float(re) * scale)), atomicAdd(cell + 1, __float2int_rn(float(im) * scale));
}
__device__ inline void add_tile(double* cell, double re, double im, float) { atomicAdd(cell, re), atomicAdd(cell + 1, im); }
__device__ inline double from_tile(int v, float scale) { return double(v) / scale; }
__device__ inline double from_tile(double v, float) { return v; }

// The fixed-point scale of one item (see TileCell): every thread of the block gets it.
__device__ inline float item_scale(const float2* c, std::int64_t start, int count) {
  __shared__ float warp_sums[32];
  __shared__ float scale;
  float sum = 0;
  for (int j = threadIdx.x; j < count; j += blockDim.x) sum += fabsf(c[start + j].x) + fabsf(c[start + j].y);
  for (int d = 16; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int k = 0; k < int(blockDim.x / 32); ++k) total += warp_sums[k];
    // |re| and |im| of a contribution are at most |c| <= |c.x| + |c.y|; 2^30 against the int's
    // 2^31 leaves room for taps a few ulps above 1 and the rounding of each contribution.
    scale = total > 0 ? ldexpf(1.f, 29 - ilogbf(total)) : 1.f;
  }
  __syncthreads();
  return scale;
}

// T: float or double, the precision of the grid's accumulation (Engine's double_grid). One block
// per item: its visibilities are spread into the tile (and the W cells beyond it) in shared
// memory, and the tile's non-zero cells added to the band of rows starting at grid row `lo`
// (`band` points at that row) with one atomic each. A visibility whose first cell is not in the
// tile (rounding at a cell boundary may put it one cell off) goes to the band directly.
template <class T, int kW>
__global__ void grid_tiles(DevicePlan p, int plane, int lo, int tiles_side, const Item* items, const float* u, const float* v,
                           const float* w, const float2* c, T* band) {
  extern __shared__ unsigned char shared[];
  using Cell = TileCell<T>;
  Cell* tile = reinterpret_cast<Cell*>(shared);
  const int W = kW > 0 ? kW : p.support, side = kTile + W, half = p.ng / 2;
  const Item it = items[blockIdx.x];
  const std::uint32_t t = it.key % std::uint32_t(tiles_side * tiles_side);
  const int row0 = int(t / tiles_side) * kTile, col0 = int(t % tiles_side) * kTile;
  for (int k = threadIdx.x; k < 2 * side * side; k += blockDim.x) tile[k] = 0;
  float scale = 1;
  if constexpr (std::is_same_v<Cell, int>) scale = item_scale(c, it.start, it.count);  // syncs the block
  else __syncthreads();
  for (int j = threadIdx.x; j < it.count; j += blockDim.x) {
    const std::int64_t i = it.start + j;
    Spread sp;
    if (!prepare<kW>(p, plane, u[i], v[i], w[i], c[i], sp)) continue;
    const int r = wstack::cuda::wrap(sp.fv + half, p.ng) - row0, q = wstack::cuda::wrap(sp.fu + half, p.ng) - col0;
    const bool inside = r >= 0 && r <= kTile && q >= 0 && q <= kTile;
    for (int a = 0; a < W; ++a) {
      const double sa = (sp.fv + a + sp.fu) & 1 ? -sp.kv[a] : sp.kv[a];
      for (int b = 0; b < W; ++b) {
        const double f = (b & 1 ? -sa : sa) * sp.ku[b];
        if (inside) {
          add_tile(tile + 2 * ((r + a) * side + q + b), sp.re * f, sp.im * f, scale);
        } else {
          add_cell(band + 2 * (std::int64_t(wstack::cuda::wrap(sp.fv + a + half, p.ng) - lo) * p.ng +
                               wstack::cuda::wrap(sp.fu + b + half, p.ng)),
                   sp.re * f, sp.im * f);
        }
      }
    }
  }
  __syncthreads();
  for (int k = threadIdx.x; k < side * side; k += blockDim.x) {
    const Cell re = tile[2 * k], im = tile[2 * k + 1];
    if (re == 0 && im == 0) continue;
    const int row = wstack::cuda::wrap(row0 + k / side, p.ng), col = wstack::cuda::wrap(col0 + k % side, p.ng);
    add_cell(band + 2 * (std::int64_t(row - lo) * p.ng + col), from_tile(re, scale), from_tile(im, scale));
  }
}

// The visibilities of sorted positions [first, first + n) that no item holds (too few share their
// key for a tile to pay), one thread each, straight into the band.
template <class T, int kW>
__global__ void grid_sparse(DevicePlan p, int plane, int lo, const float* u, const float* v, const float* w, const float2* c,
                            const std::uint8_t* tiled, std::int64_t first, std::int64_t n, T* band) {
  const int half = p.ng / 2;
  for (std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; j < n; j += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = first + j;
    Spread sp;
    if (tiled[i] || !prepare<kW>(p, plane, u[i], v[i], w[i], c[i], sp)) continue;
    const int W = kW > 0 ? kW : p.support;
    for (int a = 0; a < W; ++a) {
      T* row = band + 2 * std::int64_t(wstack::cuda::wrap(sp.fv + a + half, p.ng) - lo) * p.ng;
      const double sa = (sp.fv + a + sp.fu) & 1 ? -sp.kv[a] : sp.kv[a];
      for (int b = 0; b < W; ++b) {
        const double f = (b & 1 ? -sa : sa) * sp.ku[b];
        add_cell(row + 2 * wstack::cuda::wrap(sp.fu + b + half, p.ng), sp.re * f, sp.im * f);
      }
    }
  }
}

// Items from the runs of equal keys (cub's run-length encoding: run r holds `length[r]` sorted
// visibilities from `run_start[r]`): a run of at least `dense` visibilities becomes
// ceil(length / kChunk) items from `item_start[r]` on (so items come in key order).
__global__ void make_items(const std::uint32_t* run_key, const std::int32_t* length, const std::int32_t* run_start,
                           const std::int32_t* item_start, const std::int32_t* runs, std::int32_t dense, Item* items) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < *runs; r += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int32_t len = length[r];
    if (len < dense) continue;
    const std::int32_t chunks = (len + kChunk - 1) / kChunk;
    for (std::int32_t k = 0; k < chunks; ++k)
      items[item_start[r] + k] = Item{run_start[r] + k * kChunk, min(kChunk, len - k * kChunk), run_key[r]};
  }
}

// Marks the items' visibilities `tiled` (one block per item at a time; items past the last have
// the key with all bits set).
__global__ void mark_tiled(const Item* items, std::int64_t max_items, std::uint8_t* tiled) {
  for (std::int64_t k = blockIdx.x; k < max_items; k += gridDim.x) {
    const Item it = items[k];
    if (it.key == 0xffffffffu) return;
    for (int j = threadIdx.x; j < it.count; j += blockDim.x) tiled[it.start + j] = 1;
  }
}

// Per run: its item count (0 for runs below `dense`), for the scan that places the items.
__global__ void item_counts(const std::int32_t* length, const std::int32_t* runs, std::int32_t dense, std::int32_t* chunks,
                            std::int64_t n) {
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; r < n; r += std::int64_t(gridDim.x) * blockDim.x)
    chunks[r] = r < *runs && length[r] >= dense ? (length[r] + kChunk - 1) / kChunk : 0;
}

__global__ void to_single(const double* in, std::int64_t n, float* out) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = float(in[i]);
}

// The plane's transform (the image's columns: n x ng, wstack_cuda.cuh's PrunedFft) times its
// screen, added into the image sum, stored transposed as the columns are: acc[j][y] for pixel
// x = n - 1 - j (X = j - n/2 + 1), so that both are read along their rows. The screen's phase is
// reduced to one turn in double and its sine and cosine taken in float (about 1e-7 of each term):
// a double sincospi made this kernel FP64-bound (2.07 ms a plane at 15000^2, Nsight Compute). A:
// double, or float from kFloatSum, where the pixel's rate also comes as a float (screen_rates), not
// a double square root and division per plane: its rounding moves a phase by at most 1e-5 rad at
// |w| 1e4, far below epsilon 1e-3 (1.63 ms a plane at 15000^2).
template <class A>
__global__ void accumulate(DevicePlan p, int plane, const float2* cols, const float* rates, A* acc) {
  const std::int64_t total = std::int64_t(p.n) * p.n;
  const double wp = p.w0 + plane * p.dw;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i / p.n), y = int(i % p.n), X = j - p.n / 2 + 1, Y = y - p.n / 2;
    const float2 f = cols[std::int64_t(j) * p.ng + Y + p.ng / 2];
    double h;
    if constexpr (std::is_same_v<A, float>) h = -2 * wp * double(rates[i]);
    else h = -2 * wp * wstack::cuda::screen_rate(p, X, Y);
    h -= 2 * rint(0.5 * h);
    float sn, cs;
    sincospif(float(h), &sn, &cs);
    const A v = A(cs) * A(f.x) - A(sn) * A(f.y);
    acc[i] += (X + Y) & 1 ? -v : v;
  }
}

// Each pixel's screen rate (n - 1 - t0), in accumulate's transposed order, for its float path.
__global__ void screen_rates(DevicePlan p, float* rates) {
  const std::int64_t total = std::int64_t(p.n) * p.n;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i / p.n), y = int(i % p.n);
    rates[i] = float(wstack::cuda::screen_rate(p, j - p.n / 2 + 1, y - p.n / 2));
  }
}

// The image [y][x] from the transposed sum, its image-domain factors and 1 / sum of weights.
template <class A>
__global__ void finalize(DevicePlan p, const A* acc, const double* stats, float* out) {
  const std::int64_t total = std::int64_t(p.n) * p.n;
  const double inv = 1 / stats[0];
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int x = int(i % p.n), y = int(i / p.n);
    out[i] = float(double(acc[std::int64_t(p.n - 1 - x) * p.n + y]) * wstack::cuda::correction(p, x, y) * inv);
  }
}

// Calls f.template operator()<kW>() with kW = W for the supports of epsilon 1e-2 to 1e-4 at the
// usual paddings (their spreading kernels are compiled with the support fixed), else kW = 0.
template <class F>
void with_support(int W, F&& f) {
  switch (W) {
    case 4: f.template operator()<4>(); break;
    case 5: f.template operator()<5>(); break;
    case 6: f.template operator()<6>(); break;
    case 7: f.template operator()<7>(); break;
    case 8: f.template operator()<8>(); break;
    default: f.template operator()<0>();
  }
}

void cuda_check(cudaError_t e, const char* what) { device::check(e, kWho, what); }

template <class K>
int blocks_of(K kernel) {
  return device::resident_blocks(reinterpret_cast<const void*>(kernel), 256);
}

class WStackGridderCuda : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { engine_.emplace(make_engine(p)); }
  void prepare(PrepareContext& pc) override {
    if (!pc.dry_run && engine_) search_.start(params(), *engine_);
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    check_arrays(*block);
    for (const ArrayBase* a : {(const ArrayBase*)&block->uu, (const ArrayBase*)&block->vis, (const ArrayBase*)&block->weight})
      check_on_device(*a, "grid.wstack (cuda): the block");
    if (!obs_) obs_ = block->obs;
    const device::Stream& stream = ctx.stream();
    if (stats_.empty()) {
      stats_ = Array<double>::device(2, stream);
      device::memset_zero(stats_.data(), stats_.bytes(), stream);
      range_ = Array<unsigned>::device(3, stream);
      reset_range(stream);
    }
    const std::size_t m = block->size(), pass = std::size_t(params().pass_visibilities);
    grow(n_ + m, obs_ && obs_->total_visibilities > 0 ? std::min(std::size_t(obs_->total_visibilities), pass) : 0, stream);
    auto s = static_cast<cudaStream_t>(stream.native());
    append<<<blocks_of(append), 256, 0, s>>>(block->uu.data(), block->vv.data(), block->ww.data(),
                                             reinterpret_cast<const float2*>(block->vis.data()), block->weight.data(),
                                             std::int64_t(m), u_.data() + n_, v_.data() + n_, w_.data() + n_,
                                             reinterpret_cast<float2*>(c_.data()) + n_, stats_.data(), range_.data());
    device::check_launch("grid.wstack: append");
    n_ += m;
    if (n_ >= pass) image_pass(ctx, false);
  }

  void finish(Context& ctx) override {
    if (!obs_) throw std::runtime_error("grid.wstack: no visibility block arrived");
    image_pass(ctx, true);
    if (!(sum_weight_ > 0)) throw std::runtime_error("grid.wstack: the weights sum to 0: no visibility was gridded");
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    const int N = plan_.n;
    auto img = std::make_shared<Image>();
    img->nx = img->ny = N;
    img->pixels = Array<float>::device(std::size_t(N) * N, stream);
    if (float_sum_)
      finalize<float><<<blocks_of(finalize<float>), 256, 0, s>>>(plan_, acc32_.data(), stats_.data(), img->pixels.data());
    else
      finalize<double><<<blocks_of(finalize<double>), 256, 0, s>>>(plan_, acc64_.data(), stats_.data(), img->pixels.data());
    device::check_launch("grid.wstack: finalize");
    keep_until(stream.record(), {&acc32_, &acc64_, &rates_, &taps_, &corr_, &u_, &v_, &w_, &c_, &stats_, &range_});
    img->wcs = sky_wcs(*obs_, engine_->options().cell_rad);
    ctx.add_work({.visibilities = imaged_, .updates = updates_});
    ctx.emit(image, img);
  }

 private:
  // The visibilities staged so far, imaged over every w-plane into the sum (the planes' screened sum,
  // before the image-domain correction, which finalize applies once: every pass shares the engine
  // and so the correction); the first pass fixes the engine. Two waits: the staged tallies, then
  // the planes' starts.
  void image_pass(Context& ctx, bool at_end) {
    if (n_ == 0) return;
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    double stats[2];
    unsigned range[3];
    device::copy(stats, stats_.data(), sizeof stats, device::Copy::device_to_host, stream);
    device::copy(range, range_.data(), sizeof range, device::Copy::device_to_host, stream);
    stream.synchronize();
    if (stats[1] > 0)
      throw InputError("grid.wstack: " + std::to_string(std::int64_t(stats[1])) +
                       " visibilities have a non-finite uvw, or a non-finite value or weight");
    sum_weight_ = stats[0];
    if (at_end && !(sum_weight_ > 0)) return;  // nothing to image: finish() says so
    reset_range(stream);  // the next pass's |w| range starts afresh
    float lim[3];
    std::memcpy(lim, range, sizeof lim);
    if (!engine_chosen_) {
      search_.wait();
      engine_.emplace(first_pass_engine(*engine_, params(), obs_.get(), at_end, double(n_), lim[0], lim[1], {"cuda", 1},
                                        ctx.stage_id()));
      engine_chosen_ = true;
      float_sum_ = engine_->options().epsilon >= kFloatSum;
    }
    const wstack::Engine& e = *engine_;
    const wstack::Planes pl = e.planes(lim[0], lim[1]);
    const DevicePlan p = wstack::cuda::make_plan(e, pl, stream, taps_, corr_);
    plan_ = p;
    const wstack::cuda::Band band = wstack::cuda::band_of(p, lim[2]);
    // Sort by (first plane, tile) so that each plane's kernels read only the visibilities that
    // touch it, and the visibilities of one tile can share a shared-memory tile.
    const std::int64_t n = std::int64_t(n_);
    const int tiles_side = (p.ng + kTile - 1) / kTile;
    auto key_a = Array<std::uint32_t>::device(n_, stream), key_b = Array<std::uint32_t>::device(n_, stream);
    auto ord_a = Array<std::int32_t>::device(n_, stream), ord_b = Array<std::int32_t>::device(n_, stream);
    sort_keys<<<blocks_of(sort_keys), 256, 0, s>>>(p, tiles_side, u_.data(), v_.data(), w_.data(), n, key_a.data(), ord_a.data());
    device::check_launch("grid.wstack: sort_keys");
    cub::DoubleBuffer<std::uint32_t> keys(key_a.data(), key_b.data());
    cub::DoubleBuffer<std::int32_t> order(ord_a.data(), ord_b.data());
    const int end_bit = std::max(1, int(std::bit_width(std::uint64_t(pl.count) * tiles_side * tiles_side)));
    if (end_bit > 32) throw InputError("grid.wstack: " + std::to_string(pl.count) + " w-planes of a " + std::to_string(p.ng) +
                                       "^2 grid: too many to sort (raise cell_arcsec or lower image_size)");
    std::size_t sort_bytes = 0;
    cuda_check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, order, n, 0, end_bit, s), "sort size");
    auto sort_temp = Array<std::uint8_t>::device(std::max<std::size_t>(sort_bytes, 1), stream);
    cuda_check(cub::DeviceRadixSort::SortPairs(sort_temp.data(), sort_bytes, keys, order, n, 0, end_bit, s), "sort");
    auto su = Array<float>::device(n_, stream), sv = Array<float>::device(n_, stream), sw = Array<float>::device(n_, stream);
    auto sc = Array<cfloat>::device(n_, stream);
    auto* c = reinterpret_cast<float2*>(sc.data());
    permute<<<blocks_of(permute), 256, 0, s>>>(order.Current(), u_.data(), v_.data(), w_.data(),
                                               reinterpret_cast<const float2*>(c_.data()), n, su.data(), sv.data(), sw.data(), c);
    device::check_launch("grid.wstack: permute");
    // Items: the runs of one key with enough visibilities for a shared-memory tile to pay (its
    // (kTile + W)^2 cells flushed against W^2 atomics per visibility), in chunks of kChunk.
    const int W = p.support;
    const std::int32_t dense = std::max(2, (kTile + W) * (kTile + W) / (W * W));
    auto run_key = Array<std::uint32_t>::device(n_, stream);
    auto run_len = Array<std::int32_t>::device(n_, stream), run_start = Array<std::int32_t>::device(n_, stream);
    auto item_start = Array<std::int32_t>::device(n_, stream), runs = Array<std::int32_t>::device(1, stream);
    device::memset_zero(run_len.data(), run_len.bytes(), stream);
    std::size_t rle_bytes = 0, scan_bytes = 0;
    cuda_check(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, keys.Current(), run_key.data(), run_len.data(), runs.data(), n, s),
               "run-length size");
    cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, run_len.data(), run_start.data(), n, s), "scan size");
    auto temp = Array<std::uint8_t>::device(std::max<std::size_t>({rle_bytes, scan_bytes, 1}), stream);
    cuda_check(cub::DeviceRunLengthEncode::Encode(temp.data(), rle_bytes, keys.Current(), run_key.data(), run_len.data(), runs.data(), n, s),
               "run-length encoding");
    cuda_check(cub::DeviceScan::ExclusiveSum(temp.data(), scan_bytes, run_len.data(), run_start.data(), n, s), "scan");
    // key_b (no longer needed by the sort) holds the item counts per run.
    auto* chunks = reinterpret_cast<std::int32_t*>(keys.Alternate());
    item_counts<<<blocks_of(item_counts), 256, 0, s>>>(run_len.data(), runs.data(), dense, chunks, n);
    device::check_launch("grid.wstack: item_counts");
    cuda_check(cub::DeviceScan::ExclusiveSum(temp.data(), scan_bytes, chunks, item_start.data(), n, s), "scan");
    // Items past the last have the largest key (all bits set), which plane_starts relies on.
    const std::size_t max_items = std::size_t(2 * n / dense + 1);
    auto items = Array<std::uint8_t>::device(sizeof(Item) * max_items, stream);
    cuda_check(cudaMemsetAsync(items.data(), 0xff, items.bytes(), s), "cudaMemsetAsync");
    auto tiled = Array<std::uint8_t>::device(n_, stream);
    device::memset_zero(tiled.data(), tiled.bytes(), stream);
    auto* item = reinterpret_cast<Item*>(items.data());
    make_items<<<blocks_of(make_items), 256, 0, s>>>(run_key.data(), run_len.data(), run_start.data(), item_start.data(), runs.data(),
                                                     dense, item);
    device::check_launch("grid.wstack: make_items");
    mark_tiled<<<blocks_of(mark_tiled), 256, 0, s>>>(item, std::int64_t(max_items), tiled.data());
    device::check_launch("grid.wstack: mark_tiled");
    // Where each first plane's visibilities and items start: back with the run's second and last wait.
    const std::uint32_t tiles = std::uint32_t(tiles_side * tiles_side);
    auto starts = Array<std::int64_t>::device(2 * std::size_t(pl.count + 1), stream);
    plane_starts<<<(pl.count + 256) / 256, 256, 0, s>>>(keys.Current(), n, pl.count, tiles, starts.data());
    plane_starts<<<(pl.count + 256) / 256, 256, 0, s>>>(item, std::int64_t(max_items), pl.count, tiles, starts.data() + pl.count + 1);
    device::check_launch("grid.wstack: plane_starts");
    // Only the band's rows of the grid exist (the others hold no data), zeroed per plane. Allocated
    // and planned before the wait, so that the host's share overlaps the sort.
    const std::size_t band_cells = std::size_t(band.rows) * p.ng, pixels = std::size_t(p.n) * p.n;
    auto grid = Array<cfloat>::device(band_cells, stream);
    auto cols = Array<cfloat>::device(std::size_t(p.ng) * p.n, stream);
    if (acc32_.empty() && acc64_.empty()) {  // the first pass: the zeroed sum, and a float sum's pixel rates
      if (float_sum_) {
        acc32_ = Array<float>::device(pixels, stream);
        device::memset_zero(acc32_.data(), acc32_.bytes(), stream);
        rates_ = Array<float>::device(pixels, stream);
        screen_rates<<<blocks_of(screen_rates), 256, 0, s>>>(p, rates_.data());
        device::check_launch("grid.wstack: screen_rates");
      } else {
        acc64_ = Array<double>::device(pixels, stream);
        device::memset_zero(acc64_.data(), acc64_.bytes(), stream);
      }
    }
    fft_.ensure(p.ng, p.n, band.rows);
    auto scratch = Array<std::uint8_t>::device(fft_.work_bytes(), stream);
    fft_.bind(s, scratch.data());
    auto* gb = reinterpret_cast<float2*>(grid.data());
    const bool dbl = e.options().double_grid;
    auto dgrid = Array<double>::device(dbl ? 2 * band_cells : 0, stream);
    std::vector<std::int64_t> start(2 * std::size_t(pl.count + 1));
    device::copy(start.data(), starts.data(), starts.bytes(), device::Copy::device_to_host, stream);
    stream.synchronize();
    const std::int64_t* istart = start.data() + pl.count + 1;
    for (int plane = 0; plane < pl.count; ++plane) {
      const int lo_p0 = std::max(0, plane - W + 1), hi_p0 = std::min(plane, pl.count - W) + 1;
      const std::int64_t first = start[lo_p0], count_p = start[hi_p0] - first;
      const std::int64_t first_item = istart[lo_p0], items_p = istart[hi_p0] - first_item;
      const auto spread = [&]<class T>(T* target) {
        with_support(W, [&]<int kW>() {
          const std::size_t shm = 2 * sizeof(TileCell<T>) * (kTile + W) * (kTile + W);
          if (items_p > 0)
            grid_tiles<T, kW><<<unsigned(items_p), 256, shm, s>>>(p, plane, band.lo, tiles_side, item + first_item, su.data(),
                                                               sv.data(), sw.data(), c, target);
          device::check_launch("grid.wstack: grid_tiles");
          grid_sparse<T, kW><<<blocks_of(grid_sparse<T, kW>), 256, 0, s>>>(p, plane, band.lo, su.data(), sv.data(), sw.data(),
                                                                          c, tiled.data(), first, count_p, target);
          device::check_launch("grid.wstack: grid_sparse");
        });
      };
      if (dbl) {
        device::memset_zero(dgrid.data(), dgrid.bytes(), stream);
        spread(dgrid.data());
        to_single<<<blocks_of(to_single), 256, 0, s>>>(dgrid.data(), std::int64_t(2 * band_cells), reinterpret_cast<float*>(gb));
        device::check_launch("grid.wstack: to_single");
      } else {
        device::memset_zero(gb, band_cells * sizeof(cfloat), stream);
        spread(reinterpret_cast<float*>(gb));
      }
      fft_.forward(gb, band.lo, reinterpret_cast<float2*>(cols.data()));
      const auto* col = reinterpret_cast<const float2*>(cols.data());
      if (float_sum_)
        accumulate<float><<<blocks_of(accumulate<float>), 256, 0, s>>>(p, plane, col, rates_.data(), acc32_.data());
      else
        accumulate<double><<<blocks_of(accumulate<double>), 256, 0, s>>>(p, plane, col, nullptr, acc64_.data());
      device::check_launch("grid.wstack: accumulate");
    }
    keep_until(stream.record(), {&key_a, &key_b, &ord_a, &ord_b, &sort_temp, &run_key, &run_len, &run_start, &item_start, &runs, &temp, &items,
                                 &tiled, &starts, &su, &sv, &sw, &sc, &grid, &cols, &dgrid, &scratch, &taps_, &corr_});
    imaged_ += double(n_);
    updates_ += double(n_) * W * W * W;
    n_ = 0;
  }

  void reset_range(const device::Stream& stream) {
    const unsigned init[3] = {0x7f800000u, 0u, 0u};  // +inf, 0, 0
    device::copy(range_.data(), init, sizeof init, device::Copy::host_to_device, stream);
  }

  // Room for `need` visibilities (at least `hint`), keeping the ones staged (stream-ordered copies).
  void grow(std::size_t need, std::size_t hint, const device::Stream& stream) {
    if (need <= cap_) return;
    const std::size_t cap = std::max({need, hint, 2 * cap_});
    auto move = [&]<class T>(Array<T>& a) {
      auto b = Array<T>::device(cap, stream);
      if (n_) device::copy(b.data(), a.data(), n_ * sizeof(T), device::Copy::device_to_device, stream);
      keep_until(stream.record(), {&a});  // the old array is read by the copy just queued
      a = std::move(b);
    };
    move(u_), move(v_), move(w_), move(c_);
    cap_ = cap;
  }

  std::optional<wstack::Engine> engine_;
  bool engine_chosen_ = false;
  PaddingSearch search_;
  std::shared_ptr<const Observation> obs_;
  Array<float> u_, v_, w_;
  Array<cfloat> c_;
  Array<double> stats_;     // [sum of weights, non-finite inputs] over the whole stream
  Array<unsigned> range_;   // the staged visibilities' min |w|, max |w| (float bits), max |v|
  std::size_t n_ = 0, cap_ = 0;
  DevicePlan plan_;         // the last pass's (all share the engine, so the correction)
  Array<double> taps_, corr_;       // the plan's tables
  Array<float> acc32_;              // the passes' screened plane sum, in float (float_sum_)
  Array<double> acc64_;             // or in double
  Array<float> rates_;              // the pixels' screen rates, for the float sum
  bool float_sum_ = false;          // set with the engine (kFloatSum)
  double sum_weight_ = 0, imaged_ = 0, updates_ = 0;
  wstack::cuda::PrunedFft fft_{kWho};
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WStackGridderCuda>(); }

}  // namespace uvflow::grid_wstack
