// grid.tiled, cuda backend: four variants over the same bucket-sorted tiles.
//
//   nag     000 memo sections 3.2-3.5: a fixed number of thread blocks per tile (more for the
//           central box), 32 x 2 threads each owning a column strip of a 32 x 32 tile, half in
//           registers and half in shared memory, NAG's reordered kernel layout, atomic write-back.
//   nvidia  001 memo section 3: 32-thread blocks taking chunks of 32 entries from a global counter
//           (dynamic load balance), the chunk cached in shared memory, each thread owning a column
//           of a 32 x 16 tile in registers, written back with atomics when the tile changes; the
//           OERC kernel layout (section 4.1) and the sort results stored once (4.2).
//   uvflow  ours: a warp owns a 32 x 16 (or 32 x 32) tile for one work item (a tile's entries, at
//           most `entries_per_item` of them, taken from a global counter, so a dense tile is split
//           across warps and SMs; items ordered by w-plane so concurrent warps share kernel rows in
//           cache). Wide footprints accumulate in registers, each lane owning a tile column (no
//           atomic or shared-memory traffic per update); narrow ones go to a shared-memory tile,
//           32/C rows of C columns at a time, so a support-4 visibility keeps most lanes busy.
//           32 visibilities are loaded per warp at once and broadcast by shuffles. One atomic per
//           touched cell when the item ends. OERC kernel reads.
//   chebyshev  the uvflow kernel with its kernel values evaluated from the stack's Chebyshev fit
//           (SDP Memo 73) instead of read (the kernel source is a template parameter: TableSource
//           or ChebyshevSource), so the two compare like for like.
//
// All four report norm, gridded and skipped counts through one totals kernel over the block, and
// their kernel-point updates through a device work counter (no host synchronisation).
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <bit>

#include <stdexcept>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/tiles.hpp"
#include "stages/grid/tiled.hpp"
#include "runtime/payloads/kernel_stack_builder.hpp"
#include "stages/shared/chebyshev.hpp"
#include "stages/shared/device_grid.hpp"
#include "stages/shared/grid_atomics.cuh"
#include "stages/shared/placement.hpp"

namespace uvflow::grid_tiled {
namespace {

constexpr unsigned kFull = 0xffffffffu;

struct TileGeometry {
  int tile_u, tile_v, origin_u, origin_v, ntiles_u, ntiles_v, grid_size;
  __device__ int u0(std::int64_t t) const { return origin_u + int(t % ntiles_u) * tile_u; }
  __device__ int v0(std::int64_t t) const { return origin_v + int(t / ntiles_u) * tile_v; }
};

// One visibility as the gridding loops use it: placed, its value times weight, and the signs
// that fold the conjugation (w > 0) into the multiply-add (as the cpu backend does).
struct Vis {
  GridCoord c;
  float vr, vi, vr_s, vi_s;
};

__device__ inline Vis load_vis(const GridCoord* coords, const float2* vis, const float* weight, std::int32_t i) {
  Vis v;
  v.c = coords[i];
  const float w = weight[i];
  const float2 x = vis[i];
  v.vr = x.x * w;
  v.vi = x.y * w;
  const float sign = v.c.conj ? -1.0f : 1.0f;
  v.vr_s = sign * v.vr;
  v.vi_s = sign * v.vi;
  return v;
}

// g += (vr + i vi) * C, C conjugated through vr_s, vi_s.
__device__ inline void mad(float2& g, const Vis& v, float2 k) {
  g.x += v.vr * k.x - v.vi_s * k.y;
  g.y += v.vi * k.x + v.vr_s * k.y;
}

// ---------------------------------------------------------------- totals (all variants)

// norm, gridded and skipped counts into Grid::totals, visibilities and updates into the stage's
// device work counter: one pass over the placed block, independent of the tiling. `carried`: the
// block's own skipped count (what a cpu uvw.w_sort removed), added once.
__global__ void totals_kernel(const GridCoord* coords, const float* weight, std::int64_t n, const double* fsum, int o,
                              double carried, double* totals, double* work) {
  double norm = 0, gridded = 0, updates = 0;
  double skipped = blockIdx.x == 0 && threadIdx.x == 0 ? carried : 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const GridCoord c = coords[i];
    if (c.plane < 0) {
      skipped += 1;
      continue;
    }
    norm += double(weight[i]) * fsum[footprint_index(c, o)];
    gridded += 1;
    updates += double(2 * c.support + 1) * (2 * c.support + 1);
  }
  for (int d = 16; d > 0; d /= 2) {
    norm += __shfl_down_sync(kFull, norm, d);
    gridded += __shfl_down_sync(kFull, gridded, d);
    skipped += __shfl_down_sync(kFull, skipped, d);
    updates += __shfl_down_sync(kFull, updates, d);
  }
  __shared__ double part[4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) part[0][warp] = norm, part[1][warp] = gridded, part[2][warp] = skipped, part[3][warp] = updates;
  __syncthreads();
  if (warp == 0 && lane < 4) {
    double sum = 0;
    for (int w = 0; w < warps; ++w) sum += part[lane][w];
    if (sum != 0) {
      if (lane < 3) atomicAdd(totals + lane, sum);
      if (lane == 1) atomicAdd(work + 0, sum);  // visibilities gridded
      if (lane == 3) atomicAdd(work + 1, sum);
    }
  }
}

// What every variant reads of the placed block and writes to: the tiling, the oversampling, the
// block's columns and the grid. Each variant's arguments extend it.
struct BlockArgs {
  TileGeometry t;
  int o;
  const GridCoord* coords;
  const float2* vis;
  const float* weight;
  float2* grid;
  double2* grid64;  // accumulate: double: the cells summed here, rounded to `grid` at the end; else null
};

// A cell's sum into the grid: one float atomic, or with accumulate: double two double atomics, so
// that the sums of what the kernels write back (an item's, a flush's) do not depend on their order
// but for the last bits of a double.
__device__ inline void add_to_grid(const BlockArgs& a, std::int64_t cell, float2 v) {
  if (a.grid64) add_cell(a.grid64 + cell, v);
  else add_cell(a.grid + cell, v);
}

// ---------------------------------------------------------------- nvidia

struct NvidiaArgs : BlockArgs {
  const std::int32_t* entries;
  const std::int32_t* entry_tile;
  const std::int64_t* total;  // offsets[count()]: entries in the block
  const std::int64_t* oerc_start;
  const float2* oerc;
  unsigned long long* next_chunk;
};

constexpr int kNvidiaRows = 16;

__device__ void nvidia_flush(const NvidiaArgs& a, std::int64_t tile, float2 (&acc)[kNvidiaRows]) {
  if (tile < 0) return;
  const int u = a.t.u0(tile) + int(threadIdx.x), v0 = a.t.v0(tile);
#pragma unroll
  for (int r = 0; r < kNvidiaRows; ++r) {
    const int v = v0 + r;
    if (u >= 0 && u < a.t.grid_size && v >= 0 && v < a.t.grid_size && (acc[r].x != 0 || acc[r].y != 0))
      add_to_grid(a, std::int64_t(v) * a.t.grid_size + u, acc[r]);
    acc[r] = make_float2(0, 0);
  }
}

__global__ void __launch_bounds__(32) nvidia_kernel(const NvidiaArgs a) {
  __shared__ Vis cache[32];
  __shared__ std::int32_t cache_tile[32];
  const int lane = threadIdx.x;
  const std::int64_t total = *a.total;
  float2 acc[kNvidiaRows];
#pragma unroll
  for (int r = 0; r < kNvidiaRows; ++r) acc[r] = make_float2(0, 0);
  std::int64_t tile = -1;
  for (;;) {
    unsigned long long chunk = 0;
    if (lane == 0) chunk = atomicAdd(a.next_chunk, 1ull);
    chunk = __shfl_sync(kFull, chunk, 0);
    const std::int64_t e0 = std::int64_t(chunk) * 32;
    if (e0 >= total) break;
    // Cooperative load of 32 entries into shared memory (001 memo 3.2).
    if (e0 + lane < total) {
      cache[lane] = load_vis(a.coords, a.vis, a.weight, a.entries[e0 + lane]);
      cache_tile[lane] = a.entry_tile[e0 + lane];
    }
    __syncwarp();
    const int n = int(total - e0 < 32 ? total - e0 : 32);
    for (int q = 0; q < n; ++q) {
      const Vis v = cache[q];
      if (cache_tile[q] != tile) {  // the tile changed: write the old one back
        nvidia_flush(a, tile, acc);
        tile = cache_tile[q];
      }
      const int s = v.c.support, o = a.o, L = 2 * s + 1;
      const int k = a.t.u0(tile) + lane - v.c.u;
      if (k < -s || k > s) continue;
      const float2* col = a.oerc + a.oerc_start[v.c.plane] + oerc_offset(s, o, v.c.off_u, 0, k);
      const int j0 = a.t.v0(tile) - v.c.v;
#pragma unroll
      for (int r = 0; r < kNvidiaRows; ++r) {
        const int j = j0 + r;
        if (j < -s || j > s) continue;
        const int iv = abs(v.c.off_v + j * o);
        mad(acc[r], v, col[-iv * L]);  // int: |iv| L stays far below 2^31
      }
    }
    __syncwarp();
  }
  nvidia_flush(a, tile, acc);
}

// ---------------------------------------------------------------- nag

struct NagArgs : BlockArgs {
  const std::int64_t* offsets;
  const std::int32_t* entries;
  const std::int32_t* active;  // [tu0, tu1, tv0, tv1]
  const std::int64_t* quarter_start;
  const float2* nag;
  int central_radius;  // tiles around the centre tile processed with more blocks per tile
  int blocks_per_tile, blocks_per_central_tile;
  unsigned long long* next_unit;
};

constexpr int kNagRegs = 8, kNagShm = 8, kNagRows = 2 * (kNagRegs + kNagShm);  // 32 x 32 tiles

// One work unit = (tile, block number within the tile): NAG launched a grid of such blocks; we take
// them from a counter over the active tiles instead, so empty tiles of the whole-grid layout cost
// no launch (semantics unchanged: each tile's entries are split over its blocks by stride).
__global__ void __launch_bounds__(64) nag_kernel(const NagArgs a) {
  extern __shared__ float2 shm[];  // [kNagShm][2][32]
  const int lane = threadIdx.x, half = threadIdx.y;  // thread (lane, half) owns column `lane`
  const int tu0 = a.active[0], tu1 = a.active[1], tv0 = a.active[2], tv1 = a.active[3];
  if (tu0 > tu1) return;
  const std::int64_t w = tu1 - tu0 + 1, h = tv1 - tv0 + 1;
  const int cu = int((a.t.grid_size / 2 - a.t.origin_u) / a.t.tile_u), cv = int((a.t.grid_size / 2 - a.t.origin_v) / a.t.tile_v);
  const int box = 2 * a.central_radius + 1;
  // Units [0, outer): blocks_per_tile per active tile outside the central box; then
  // blocks_per_central_tile per tile of the central box.
  const std::int64_t outer = w * h * a.blocks_per_tile;
  const std::int64_t units = outer + (a.central_radius >= 0 ? std::int64_t(box) * box * a.blocks_per_central_tile : 0);
  __shared__ unsigned long long unit_shared;
  for (;;) {
    if (lane == 0 && half == 0) unit_shared = atomicAdd(a.next_unit, 1ull);
    __syncthreads();
    const std::int64_t unit = std::int64_t(unit_shared);
    __syncthreads();
    if (unit >= units) break;
    int tu, tv, bid, nblks;
    if (unit < outer) {
      tu = tu0 + int(unit % w);
      tv = tv0 + int(unit / w % h);
      bid = int(unit / (w * h));
      nblks = a.blocks_per_tile;
      if (abs(tu - cu) <= a.central_radius && abs(tv - cv) <= a.central_radius) continue;  // a central tile
    } else {
      const std::int64_t c = unit - outer;
      tu = cu - a.central_radius + int(c % box);
      tv = cv - a.central_radius + int(c / box % box);
      bid = int(c / (std::int64_t(box) * box));
      nblks = a.blocks_per_central_tile;
      if (tu < tu0 || tu > tu1 || tv < tv0 || tv > tv1) continue;  // no data there
    }
    const std::int64_t tile = std::int64_t(tv) * a.t.ntiles_u + tu;
    const std::int64_t first = a.offsets[tile], last = a.offsets[tile + 1];
    if (first + bid >= last) continue;
    float2 regs[kNagRegs];
#pragma unroll
    for (int r = 0; r < kNagRegs; ++r) regs[r] = make_float2(0, 0);
    float2* mine = shm + (half * kNagShm) * 32 + lane;  // [r][32] rows of this half
#pragma unroll
    for (int r = 0; r < kNagShm; ++r) mine[r * 32] = make_float2(0, 0);
    const int u = a.t.u0(tile) + lane, v_start = a.t.v0(tile) + half * (kNagRegs + kNagShm);
    for (std::int64_t e = first + bid; e < last; e += nblks) {
      const Vis v = load_vis(a.coords, a.vis, a.weight, a.entries[e]);
      const int s = v.c.support, o = a.o, S = kernel_half_size(o, s);
      const int k = u - v.c.u;
      if (k < -s || k > s) continue;  // is_my_k (Listing 6)
      const float2* plane = a.nag + a.quarter_start[v.c.plane];
      const int col = nag_column(s, o, v.c.off_u, k);
#pragma unroll
      for (int r = 0; r < kNagRegs + kNagShm; ++r) {
        const int j = v_start + r - v.c.v;
        if (j < -s || j > s) continue;  // is_my_j
        const float2 kv = plane[std::int64_t(abs(v.c.off_v + j * o)) * S + col];
        if (r < kNagRegs) mad(regs[r], v, kv);
        else mad(mine[(r - kNagRegs) * 32], v, kv);
      }
    }
#pragma unroll
    for (int r = 0; r < kNagRegs + kNagShm; ++r) {
      const int vv = v_start + r;
      const float2 g = r < kNagRegs ? regs[r] : mine[(r - kNagRegs) * 32];
      if (u >= 0 && u < a.t.grid_size && vv >= 0 && vv < a.t.grid_size && (g.x != 0 || g.y != 0))
        add_to_grid(a, std::int64_t(vv) * a.t.grid_size + u, g);
    }
  }
}

// ---------------------------------------------------------------- uvflow

struct Item {
  std::int32_t tile;
  std::int32_t count;
  std::int64_t first;
};

// Items per active tile: ceil(entries / per_item).
__global__ void count_items(const std::int64_t* offsets, const std::int32_t* active, int ntiles_u, int per_item,
                            std::int32_t* items_per_tile, std::int64_t n_active_max) {
  const int tu0 = active[0], tu1 = active[1], tv0 = active[2], tv1 = active[3];
  const std::int64_t w = tu1 - tu0 + 1, h = tv1 >= tv0 ? tv1 - tv0 + 1 : 0;
  const std::int64_t n = tu0 <= tu1 ? w * h : 0;
  for (std::int64_t k = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; k < n_active_max; k += std::int64_t(gridDim.x) * blockDim.x) {
    std::int32_t items = 0;
    if (k < n) {
      const std::int64_t tile = (tv0 + k / w) * ntiles_u + tu0 + k % w;
      const std::int64_t entries = offsets[tile + 1] - offsets[tile];
      items = std::int32_t((entries + per_item - 1) / per_item);
    }
    items_per_tile[k] = items;
  }
}

__global__ void fill_items(const std::int64_t* offsets, const std::int32_t* active, int ntiles_u, int per_item,
                           const std::int32_t* items_per_tile, const std::int32_t* first_item, std::int64_t n_active_max,
                           Item* items, std::int32_t* n_items) {
  const int tu0 = active[0], tu1 = active[1], tv0 = active[2], tv1 = active[3];
  const std::int64_t w = tu1 - tu0 + 1, h = tv1 >= tv0 ? tv1 - tv0 + 1 : 0;
  const std::int64_t n = tu0 <= tu1 ? w * h : 0;
  for (std::int64_t k = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; k < n; k += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t tile = (tv0 + k / w) * ntiles_u + tu0 + k % w;
    const std::int64_t begin = offsets[tile], end = offsets[tile + 1];
    for (std::int32_t q = 0; q < items_per_tile[k]; ++q) {
      const std::int64_t first = begin + std::int64_t(q) * per_item;
      items[first_item[k] + q] = Item{std::int32_t(tile), std::int32_t(end - first < per_item ? end - first : per_item), first};
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *n_items = n > 0 ? first_item[n - 1] + items_per_tile[n - 1] : 0;
}

// Schedule keys: the w-plane of each item's first entry (entries are about plane-sorted within a
// tile), and past the last plane for the unused slots, so that warps running at the same time
// grid the same planes and their kernel values stay in L2 rather than streaming from memory.
__global__ void item_keys(const Item* items, const std::int32_t* n_items, const std::int32_t* entries,
                          const GridCoord* coords, std::int64_t max_items, std::uint32_t unused,
                          std::uint32_t* keys, std::int32_t* order) {
  const std::int32_t n = *n_items;
  for (std::int64_t k = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; k < max_items; k += std::int64_t(gridDim.x) * blockDim.x) {
    keys[k] = k < n ? std::uint32_t(coords[entries[items[k].first]].plane) : unused;
    order[k] = std::int32_t(k);
  }
}

constexpr int kUvflowWarps = 4;
// Kernel rows loaded together before their FMAs (measured on the H100, el56-82: groups of 8 beat
// 4 and 16 by 3-10 %; groups outside a footprint are skipped).
constexpr int kRowGroup = 8;

// Where the uvflow design gets kernel values: K at footprint column k0 + lc (the lane's, counted
// from the first column `at` was made for) and kernel row t (off_v + j o, before |.|). `at` once per
// visibility and tile; `group` for kRowGroup rows t, t + o, ... of which rows lo..hi (relative to
// the group) are in the footprint (the others give 0); `value` for one row.
//
// The table (variant uvflow): OERC layout reads.
struct TableSource {
  const std::int64_t* oerc_start;
  const float2* oerc;
  int o;
  struct At {
    const float2* col0;  // kernel value of column k0 at kernel row 0; column k0 + lc is col0 + sgn lc
    int L, sgn;          // kernel row length and the sign of off_u
  };
  __device__ At at(const GridCoord& c, int k0) const {
    const int s = c.support;
    return {oerc + oerc_start[c.plane] + oerc_offset(s, o, c.off_u, 0, k0), 2 * s + 1, c.off_u >= 0 ? 1 : -1};
  }
  __device__ float2 value(const At& a, int lc, int t) const { return __ldg(a.col0 + a.sgn * lc - abs(t) * a.L); }
  // The group's values are loaded before any is used, so their latencies overlap. Offsets are int
  // (|t| L is far below 2^31), which keeps the address arithmetic short.
  __device__ void group(const At& a, int lc, int t, int lo, int hi, float2 (&k)[kRowGroup]) const {
    const float2* col = a.col0 + a.sgn * lc;
    if (lo <= 0 && hi >= kRowGroup - 1 && (t >= 0 || t + (kRowGroup - 1) * o <= 0)) {
      // All the group's rows in the footprint, on one side of the kernel's centre row: the
      // kernel rows are equally spaced, one address step each.
      const int step = (t >= 0 ? -o : o) * a.L;
      const float2* p = col - abs(t) * a.L;
#pragma unroll
      for (int r = 0; r < kRowGroup; ++r, p += step) k[r] = __ldg(p);
    } else {
#pragma unroll
      for (int r = 0; r < kRowGroup; ++r) k[r] = r >= lo && r <= hi ? __ldg(col - abs(t + r * o) * a.L) : make_float2(0, 0);
    }
  }
};

// The Chebyshev fit (variant chebyshev): Clenshaw's recurrence at each point's distance, zero
// beyond the fit's disc. The coefficients are warp-uniform loads (broadcasts from L1).
struct ChebyshevSource {
  ChebyshevKernel cheb;
  struct At {
    const float* coef;
    int limit;
    float scale;
    int ix0;  // sub-sample offset along u of column k0
  };
  __device__ At at(const GridCoord& c, int k0) const {
    const ChebyshevKernel::Plane q = cheb.plane(c.plane);
    return {q.coef, q.limit, q.scale, c.off_u + k0 * cheb.oversample};
  }
  __device__ float2 value(const At& a, int lc, int t) const {
    float2 k;
    cheb.value({a.coef, a.limit, a.scale}, a.ix0 + lc * cheb.oversample, t, k.x, k.y);
    return k;
  }
  // The group's rows evaluated together, one coefficient load per term for all of them: the
  // recurrences are independent, so their multiply-adds overlap.
  __device__ void group(const At& a, int lc, int t, int lo, int hi, float2 (&k)[kRowGroup]) const {
    const int o = cheb.oversample, ix = a.ix0 + lc * o;
    const ChebyshevKernel::Plane q{a.coef, a.limit, a.scale};
    float x2[kRowGroup], br1[kRowGroup], bi1[kRowGroup], br2[kRowGroup], bi2[kRowGroup];
    bool in[kRowGroup];
#pragma unroll
    for (int r = 0; r < kRowGroup; ++r) {
      const int iy = t + r * o, n = ix * ix + iy * iy;
      in[r] = r >= lo && r <= hi && n <= a.limit;
      x2[r] = 2 * cheb.arg(q, n);
      br1[r] = bi1[r] = br2[r] = bi2[r] = 0;
    }
    const float2* c = reinterpret_cast<const float2*>(a.coef);
    for (int j = cheb.terms - 1; j >= 1; --j) {
      const float2 cj = __ldg(c + j);
#pragma unroll
      for (int r = 0; r < kRowGroup; ++r) {
        const float br = x2[r] * br1[r] - br2[r] + cj.x, bi = x2[r] * bi1[r] - bi2[r] + cj.y;
        br2[r] = br1[r], bi2[r] = bi1[r], br1[r] = br, bi1[r] = bi;
      }
    }
    const float2 c0 = __ldg(c);
#pragma unroll
    for (int r = 0; r < kRowGroup; ++r)
      k[r] = in[r] ? make_float2(0.5f * x2[r] * br1[r] - br2[r] + c0.x, 0.5f * x2[r] * bi1[r] - bi2[r] + c0.y)
                   : make_float2(0, 0);
  }
};

template <class Src>
struct UvflowArgs : BlockArgs {
  const std::int32_t* entries;
  const Item* items;
  const std::int32_t* order;  // items in schedule order
  const std::int32_t* n_items;
  Src src;
  unsigned long long* next_item;
  int register_cols;  // footprints at least this wide (in the tile) are gridded in registers
};

// One visibility's view of the current tile, prepared by the lane that loaded it and read by the
// whole warp from shared memory (16-byte broadcasts): the footprint clipped to the tile as tile
// rows r0..r1 and columns c0..c1, and where its kernel values are.
template <class Src>
struct alignas(16) Clipped {
  typename Src::At at;  // kernel values from tile column c0 on
  int r0, r1, c0, c1;   // the footprint's rows and columns inside the tile
  int t0;               // kernel row (before |.|) of tile row 0: tile row r reads row |t0 + r o|
  float vr, vi, vr_s, vi_s;
};

template <class Src>
__device__ inline Clipped<Src> clip(const UvflowArgs<Src>& a, std::int32_t i, int u0, int v0, int TV) {
  Clipped<Src> c;
  const Vis v = load_vis(a.coords, a.vis, a.weight, i);
  const int s = v.c.support, o = a.o;
  const int k0 = max(u0 - v.c.u, -s), k1 = min(u0 + 31 - v.c.u, s);
  const int j0 = max(v0 - v.c.v, -s), j1 = min(v0 + TV - 1 - v.c.v, s);
  c.c0 = v.c.u + k0 - u0, c.c1 = v.c.u + k1 - u0;
  c.r0 = v.c.v + j0 - v0, c.r1 = v.c.v + j1 - v0;
  c.t0 = v.c.off_v + (v0 - v.c.v) * o;  // tile row r is footprint row r + v0 - v
  c.at = a.src.at(v.c, k0);
  c.vr = v.vr, c.vi = v.vi, c.vr_s = v.vr_s, c.vi_s = v.vi_s;
  return c;
}

// g += (vr + i vi) * k as four FMAs (k conjugated through the signed parts); a zero k leaves g as
// it is.
template <class C>
__device__ inline void update(float2& g, const C& v, float2 k) {
  g.x = fmaf(v.vr, k.x, g.x);
  g.x = fmaf(-v.vi_s, k.y, g.x);
  g.y = fmaf(v.vi, k.x, g.y);
  g.y = fmaf(v.vr_s, k.y, g.y);
}

// A warp owns a 32 x TV tile. Lane c keeps column c of it in registers (acc) for wide footprints:
// per update one coalesced kernel read and four FMAs, the row test warp-uniform. Narrow
// footprints (the small supports far from the core) would leave most lanes idle that way, so they
// go to the shared tile instead, 32 / cols rows at a time. Both are summed into the shared tile
// when the item ends and the touched box goes to the grid with one atomic per cell.
template <int TV, class Src>
__global__ void __launch_bounds__(32 * kUvflowWarps) uvflow_kernel(const UvflowArgs<Src> a) {
  extern __shared__ float2 shm[];
  __shared__ Clipped<Src> staged[kUvflowWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, o = a.o;
  float2* tile = shm + std::int64_t(warp) * 32 * TV;
  for (int c = lane; c < 32 * TV; c += 32) tile[c] = make_float2(0, 0);
  __syncwarp();
  float2 acc[TV];
#pragma unroll
  for (int r = 0; r < TV; ++r) acc[r] = make_float2(0, 0);
  const std::int32_t n_items = *a.n_items;
  for (;;) {
    unsigned long long item = 0;
    if (lane == 0) item = atomicAdd(a.next_item, 1ull);
    item = __shfl_sync(kFull, item, 0);
    if (item >= static_cast<unsigned long long>(n_items)) break;
    const Item it = a.items[a.order[item]];
    const int u0 = a.t.u0(it.tile), v0 = a.t.v0(it.tile);
    int r_lo = TV, r_hi = -1, c_lo = 32, c_hi = -1;  // cells touched in this item (warp-uniform)
    for (int chunk = 0; chunk < it.count; chunk += 32) {
      // 32 visibilities loaded and clipped at once, one per lane: their memory latency overlaps.
      const int n = min(32, it.count - chunk);
      __syncwarp();  // the previous chunk's reads of `staged` are done
      if (lane < n) staged[warp][lane] = clip(a, a.entries[it.first + chunk + lane], u0, v0, TV);
      __syncwarp();
      for (int q = 0; q < n; ++q) {
        const Clipped<Src> v = staged[warp][q];
        const int cols = v.c1 - v.c0 + 1;
        if (cols >= a.register_cols) {
          const int lc = lane - v.c0;
          if (lc >= 0 && lc < cols) {
            // A group of rows' kernel values at once; groups outside the footprint are skipped
            // (warp-uniform).
#pragma unroll
            for (int rg = 0; rg < TV; rg += kRowGroup) {
              if (rg > v.r1 || rg + kRowGroup - 1 < v.r0) continue;
              float2 k[kRowGroup];
              a.src.group(v.at, lc, v.t0 + rg * o, v.r0 - rg, v.r1 - rg, k);
#pragma unroll
              for (int r = 0; r < kRowGroup; ++r) update(acc[rg + r], v, k[r]);
            }
          }
        } else {
          // Lane -> (row within a pass of rows_per_pass rows, column).
          const int rows_per_pass = 32 / cols, lr = lane / cols, lc = lane - lr * cols;
          if (lr < rows_per_pass) {
            float2* cell = tile + (v.r0 + lr) * 32 + v.c0 + lc;
            const int step = rows_per_pass * 32;
#pragma unroll 4
            for (int r = v.r0 + lr; r <= v.r1; r += rows_per_pass, cell += step) {
              float2 g = *cell;
              update(g, v, a.src.value(v.at, lc, v.t0 + r * o));
              *cell = g;
            }
          }
          // Lanes of later visibilities may update the same cells: keep the warp in step.
          __syncwarp();
        }
        r_lo = min(r_lo, v.r0), r_hi = max(r_hi, v.r1);
        c_lo = min(c_lo, v.c0), c_hi = max(c_hi, v.c1);
      }
    }
    // Registers into the shared tile (each lane its own column), then the touched box to the grid,
    // leaving tile and registers zero for the next item.
#pragma unroll
    for (int r = 0; r < TV; ++r) {
      float2& g = tile[r * 32 + lane];
      g.x += acc[r].x, g.y += acc[r].y;
      acc[r] = make_float2(0, 0);
    }
    __syncwarp();
    const int bw = c_hi - c_lo + 1, cells = (r_hi - r_lo + 1) * bw;
    for (int q = lane; q < cells; q += 32) {
      const int r = r_lo + q / bw, c = c_lo + q % bw;
      float2& g = tile[r * 32 + c];
      if (g.x != 0 || g.y != 0) add_to_grid(a, std::int64_t(v0 + r) * a.t.grid_size + u0 + c, g);
      g = make_float2(0, 0);
    }
    __syncwarp();
  }
}

// ---------------------------------------------------------------- the stage

void check_cuda(cudaError_t e, const char* what) { device::check(e, "grid.tiled (cuda)", what); }

class TiledCuda final : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    variant_ = p.variant;
    central_box_ = int(p.central_box);
    per_item_ = int(p.entries_per_item);
    register_cols_ = int(p.register_columns);
    nag_blocks_ = int(p.nag_blocks_per_tile);
    nag_central_blocks_ = int(p.nag_blocks_per_central_tile);
    double_ = p.accumulate == "double";
  }

  void prepare(PrepareContext& pc) override {
    if (pc.dry_run) return;
    if (const auto& g = pc.output(grid).grid) make_grid(*g, pc.stream);
    sms_ = device::multiprocessors();
    // The uvflow kernel holds kUvflowWarps tiles of 32 x tile_v cells in shared memory.
    if (variant_ == "chebyshev") allow_tiles<ChebyshevSource>();
    else allow_tiles<TableSource>();
  }

  void process(Context& ctx) override {
    auto b = ctx.in(buckets);
    auto ks = ctx.in(kernels);
    check_inputs(*b, *ks);
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    if (!grid_) make_grid(ks->geom, stream);
    expect_geometry(*grid_, ks->geom, "grid.tiled");
    if (!grid_->obs) grid_->obs = b->vis.obs;
    if (!work_registered_) ctx.add_work_on_device(work_), work_registered_ = true;
    const VisBlock& vis = b->vis;
    const std::int64_t n = std::int64_t(vis.size());
    const auto* coords = vis.coords.data();
    const auto* val = reinterpret_cast<const float2*>(vis.vis.data());
    const float* weight = vis.weight.data();
    if (n > 0 || vis.skipped > 0) {
      // The norm of what the variant adds: the fit's footprint sums for chebyshev.
      const double* fsum = (variant_ == "chebyshev" ? ks->cheb_footprint_sum : ks->footprint_sum).data();
      totals_kernel<<<std::clamp<std::int64_t>((n + 255) / 256, 1, 4 * sms_), 256, 0, s>>>(
          coords, weight, n, fsum, ks->oversample, double(vis.skipped), grid_->totals.data(), work_.data());
      device::check_launch("grid.tiled: totals_kernel");
    }
    const TileLayout& l = b->layout;
    const TileGeometry t{l.tile_u, l.tile_v, l.origin_u, l.origin_v, l.ntiles_u, l.ntiles_v, ks->geom.grid_size};
    auto counter = Array<unsigned long long>::device(1, stream);
    device::memset_zero(counter.data(), counter.bytes(), stream);
    const BlockArgs block{t,      ks->oversample, coords, val, weight, reinterpret_cast<float2*>(grid_->cells.data()),
                          reinterpret_cast<double2*>(grid_->cells64.data())};
    const auto* oerc = reinterpret_cast<const float2*>(ks->oerc.data());
    if (variant_ == "nvidia") {
      const NvidiaArgs a{block, b->entries.data(), b->entry_tile.data(), b->offsets.data() + l.count(),
                         ks->oerc_start.data(), oerc, counter.data()};
      nvidia_kernel<<<10000, 32, 0, s>>>(a);  // the memo's 10000 dynamic blocks
      device::check_launch("grid.tiled: nvidia_kernel");
    } else if (variant_ == "nag") {
      const NagArgs a{block, b->offsets.data(), b->entries.data(), b->active.data(), ks->quarter_start.data(),
                      reinterpret_cast<const float2*>(ks->nag.data()), central_box_, nag_blocks_, nag_central_blocks_,
                      counter.data()};
      nag_kernel<<<8 * sms_, dim3(32, 2), kNagShm * 2 * 32 * sizeof(float2), s>>>(a);
      device::check_launch("grid.tiled: nag_kernel");
    } else if (variant_ == "chebyshev") {
      grid_uvflow(block, *b, *ks, ChebyshevSource{ChebyshevKernel::of(*ks)}, counter, ctx);
    } else {
      grid_uvflow(block, *b, *ks, TableSource{ks->oerc_start.data(), oerc, ks->oversample}, counter, ctx);
    }
    counter.storage()->set_last_writer(stream.record());
  }

  void finish(Context& ctx) override {
    if (!grid_) make_grid(ctx.in(kernels)->geom, ctx.stream());
    round_double_sums(*grid_, ctx.stream(), "grid.tiled");
    ctx.emit(grid, std::move(grid_));
  }

 private:
  // In prepare() where the kernels' geometry was described, else at the first block; the work
  // counters are handed to the framework at the first block (prepare has no Context).
  void make_grid(const GridGeometry& g, const device::Stream& stream) {
    grid_ = std::make_shared<Grid>(device_grid(g, double_, stream));
    work_ = Array<double>::device(2, stream);
    device::memset_zero(work_.data(), work_.bytes(), stream);
  }

  template <class Src>
  static void allow_tiles() {
    check_cuda(cudaFuncSetAttribute(uvflow_kernel<16, Src>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kUvflowWarps * 32 * 16 * int(sizeof(float2))),
               "cudaFuncSetAttribute");
    check_cuda(cudaFuncSetAttribute(uvflow_kernel<32, Src>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kUvflowWarps * 32 * 32 * int(sizeof(float2))),
               "cudaFuncSetAttribute");
  }

  template <class Src>
  void grid_uvflow(const BlockArgs& block, const TileBuckets& b, const KernelStack& ks, const Src& src,
                   Array<unsigned long long>& counter, Context& ctx) {
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    const TileLayout& l = b.layout;
    // Work items over the active tiles; their number is only known on the device, so every array
    // is sized by host-known bounds: all tiles, and the entries' capacity over the item size.
    const std::int64_t tiles = l.count();
    const std::int64_t max_items = tiles + std::int64_t(b.entries.size()) / per_item_ + 1;
    auto items_per_tile = Array<std::int32_t>::device(std::size_t(tiles), stream);
    auto first_item = Array<std::int32_t>::device(std::size_t(tiles), stream);
    auto items = Array<Item>::device(std::size_t(max_items), stream);
    auto n_items = Array<std::int32_t>::device(1, stream);
    const int blocks = 4 * sms_;
    count_items<<<blocks, 256, 0, s>>>(b.offsets.data(), b.active.data(), l.ntiles_u, per_item_,
                                       items_per_tile.data(), tiles);
    device::check_launch("grid.tiled: count_items");
    std::size_t temp_bytes = 0;
    check_cuda(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, items_per_tile.data(), first_item.data(), int(tiles), s),
          "cub::DeviceScan::ExclusiveSum (size)");
    auto temp = Array<std::uint8_t>::device(std::max<std::size_t>(temp_bytes, 1), stream);
    check_cuda(cub::DeviceScan::ExclusiveSum(temp.data(), temp_bytes, items_per_tile.data(), first_item.data(), int(tiles), s),
          "cub::DeviceScan::ExclusiveSum");
    fill_items<<<blocks, 256, 0, s>>>(b.offsets.data(), b.active.data(), l.ntiles_u, per_item_, items_per_tile.data(),
                                      first_item.data(), tiles, items.data(), n_items.data());
    device::check_launch("grid.tiled: fill_items");
    auto keys = Array<std::uint32_t>::device(std::size_t(max_items), stream);
    auto keys_sorted = Array<std::uint32_t>::device(std::size_t(max_items), stream);
    auto unsorted = Array<std::int32_t>::device(std::size_t(max_items), stream);
    auto order = Array<std::int32_t>::device(std::size_t(max_items), stream);
    const auto unused = std::uint32_t(ks.planes);
    item_keys<<<blocks, 256, 0, s>>>(items.data(), n_items.data(), b.entries.data(), b.vis.coords.data(), max_items,
                                     unused, keys.data(), unsorted.data());
    device::check_launch("grid.tiled: item_keys");
    const int end_bit = int(std::bit_width(unused));
    std::size_t sort_bytes = 0;
    check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys.data(), keys_sorted.data(), unsorted.data(),
                                          order.data(), max_items, 0, end_bit, s),
          "cub::DeviceRadixSort::SortPairs (size)");
    auto sort_temp = Array<std::uint8_t>::device(std::max<std::size_t>(sort_bytes, 1), stream);
    check_cuda(cub::DeviceRadixSort::SortPairs(sort_temp.data(), sort_bytes, keys.data(), keys_sorted.data(), unsorted.data(),
                                          order.data(), max_items, 0, end_bit, s),
          "cub::DeviceRadixSort::SortPairs");
    const UvflowArgs<Src> a{block, b.entries.data(), items.data(), order.data(), n_items.data(), src, counter.data(),
                            register_cols_};
    const int shm = kUvflowWarps * 32 * l.tile_v * int(sizeof(float2));
    const auto kernel = l.tile_v == 16 ? uvflow_kernel<16, Src> : uvflow_kernel<32, Src>;
    kernel<<<device::resident_blocks(reinterpret_cast<const void*>(kernel), 32 * kUvflowWarps, shm), 32 * kUvflowWarps,
             shm, s>>>(a);
    device::check_launch("grid.tiled: uvflow_kernel");
    keep_until(stream.record(), {&items_per_tile, &first_item, &items, &n_items, &temp, &keys, &keys_sorted, &unsorted,
                                 &order, &sort_temp});
  }

  void check_inputs(const TileBuckets& b, const KernelStack& ks) const {
    const std::string where = "grid.tiled (cuda, " + variant_ + "), block " + std::to_string(b.index) + ": ";
    // Inputs that do not fit the variant or the kernels are the pipeline's (exit 4, as the cpu
    // backend's checks); host-resident inputs would be a planning bug.
    auto bad = [&](const std::string& why) { throw InputError(where + why); };
    for (const ArrayBase* x : std::initializer_list<const ArrayBase*>{&b.vis.coords, &b.vis.vis, &b.vis.weight, &b.offsets,
                                                                      &b.entries, &b.active, &ks.support, &ks.footprint_sum})
      if (x->location() != Location::device) throw std::logic_error(where + "its inputs must be on the device");
    if (!b.vis.placed() || b.vis.grid_size != ks.geom.grid_size) bad("the block is not placed for these kernels (uvw.w_sort)");
    if (b.offsets.size() != std::size_t(b.layout.count()) + 1) bad("tile offsets do not match the tile layout");
    const bool oerc = !ks.oerc.empty() && ks.oerc_start.size() == std::size_t(ks.planes);
    const bool chebyshev = variant_ == "chebyshev";
    if (chebyshev) {
      const std::size_t planes = std::size_t(ks.planes), o1 = std::size_t(ks.oversample) + 1;
      if (ks.cheb_terms < 1)
        bad("variant chebyshev needs the kernel stack's Chebyshev fit: set kernels.wproj chebyshev (the number of "
            "coefficients, e.g. 25)");
      if (ks.cheb_coef.size() != planes * std::size_t(ks.cheb_terms) || ks.cheb_radius.size() != planes ||
          ks.cheb_footprint_sum.size() != planes * o1 * o1)
        bad("the kernel stack's Chebyshev fit does not match its planes");
      for (const ArrayBase* x : std::initializer_list<const ArrayBase*>{&ks.cheb_coef, &ks.cheb_radius, &ks.cheb_footprint_sum})
        if (x->location() != Location::device) throw std::logic_error(where + "its inputs must be on the device");
    }
    if (variant_ != "nag" && !chebyshev && !oerc) bad("needs the OERC kernel layout: set kernels.wproj layouts: gpu (or all)");
    if (variant_ == "nag" && ks.nag.size() != ks.quarter.size()) bad("needs the NAG kernel layout: set kernels.wproj layouts: gpu");
    if (variant_ == "nvidia" && (b.layout.tile_u != 32 || b.layout.tile_v != kNvidiaRows))
      bad("the nvidia variant works on 32 x 16 tiles (tiles.count tile_u: 32, tile_v: 16)");
    if (variant_ == "nvidia" && b.entry_tile.size() != b.entries.size()) bad("needs each entry's tile (tiles.bucket_sort cuda)");
    if (variant_ == "nag" && (b.layout.tile_u != 32 || b.layout.tile_v != kNagRows))
      bad("the nag variant works on 32 x 32 tiles (tiles.count tile_u: 32, tile_v: 32)");
    if ((variant_ == "uvflow" || chebyshev) && (b.layout.tile_u != 32 || (b.layout.tile_v != 16 && b.layout.tile_v != 32)))
      bad("the " + variant_ + " variant works on 32 x 16 or 32 x 32 tiles (tiles.count tile_u: 32, tile_v: 16 or 32)");
  }

  std::string variant_ = "uvflow";
  int central_box_ = 2, per_item_ = 256, register_cols_ = 8, nag_blocks_ = 16, nag_central_blocks_ = 1000;
  int sms_ = 1;
  bool double_ = false;
  std::shared_ptr<Grid> grid_;
  Array<double> work_;
  bool work_registered_ = false;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<TiledCuda>(); }

}  // namespace uvflow::grid_tiled
