// degrid.wproj, cuda backend: four designs, chosen by `variant`. A visibility's prediction is the
// sum over its (2s+1)^2 footprint of G * conj(C) (C as the gridder adds it), so every variant
// computes the same sums in a different order and matches the cpu backend to float rounding.
//   gather         the degridding report's (003) design: one warp per visibility (a grid-stride
//                  loop over the block), lanes across the flattened footprint, quarter kernels read
//                  at |off + k o| (stride o along u), one warp reduction per visibility.
//   uvflow         ours: visits the block in (w-plane, Morton cell) order, sorted on the device,
//                  and degrids groups of up to 6 visibilities of one plane a few cells apart (with
//                  the others at their cells and sub-cell offsets, which share their predictions)
//                  at once, a warp walking the union of their footprints and loading each grid
//                  value once for the whole group (see "uvflow (nearest lookup)" below). With
//                  kernel_lookup linear, a warp split into groups of 8, 16 or 32 lanes by the
//                  support, each lane owning footprint columns (linear_kernel).
//   scatter        the report's alternative: threads own grid points. The block's (visibility,
//                  32 x 16 tile) pairs are bucketed by tile (the report's "bookmarks"); a thread
//                  block per tile holds the tile's cells in registers (a warp per tile row), reads
//                  the kernel for every visibility of the bucket, reduces per warp and adds the
//                  row's part to the visibility with an atomic (independent warps, no block sync).
//   moving_window  Romein's per-baseline window: the block is grouped by baseline (antenna1,
//                  antenna2 on the host; a stable device sort keeps each baseline in time order)
//                  and one warp degrids one baseline's time block, in time order, through a
//                  32 x 32-cell window in shared memory indexed by (u mod 32, v mod 32) and tagged
//                  with the cell it holds: a cell is read from the grid only when the track has
//                  moved onto it. Footprints wider than the window (s > 15) read the grid directly.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <bit>
#include <climits>
#include <vector>

#include "runtime/cuda_check.hpp"
#include "stages/degrid/wproj.hpp"
#include "stages/shared/degrid_inputs.hpp"
#include "stages/shared/locality_order.cuh"
#include "stages/shared/placement.hpp"

namespace uvflow::degrid_wproj {
namespace {

using locality::kFull;
using locality::kWarp;
constexpr int kWarpsPerBlock = 8;
constexpr int kTileU = 32, kTileV = 16;  // scatter: a warp per tile row
constexpr int kWindow = 32, kWindowWarps = 4;  // moving_window: cells a side, warps per block

enum class Design { gather, uvflow, scatter, moving_window };

Design design_of(const std::string& v) {
  if (v == "gather") return Design::gather;
  if (v == "scatter") return Design::scatter;
  if (v == "moving_window") return Design::moving_window;
  return Design::uvflow;
}

struct Args {
  Placement g;
  std::int64_t n;
  const GridCoord* coords;  // placed blocks; null: place here
  const float *uu, *vv, *ww;
  const std::int32_t* support;
  const std::int64_t* start;  // quarter_start (gather) or rows_start (the others; null for uvflow nearest)
  const float2* kernels;      // quarter (gather, uvflow nearest: its ResidueTable is made from it) or rows
  const float2* grid;
  float2* out;
  double* work;  // [visibilities, updates]
};

__device__ inline bool coord_of(const Args& a, std::int64_t i, GridCoord& c) {
  if (a.coords) {
    c = a.coords[i];
    return c.plane >= 0;
  }
  return place(a.g, a.support, a.uu[i], a.vv[i], a.ww[i], c) == Placed::inside;
}

// The start of the rows-layout runs of a placed visibility: run for footprint row j (0..2s) at
// + |off_v + (j - s) o| * (2s + 1).
__device__ inline const float2* rows_of(const Args& a, const GridCoord& c) {
  const int o = a.g.oversample, s = c.support;
  return a.kernels + a.start[c.plane] + std::int64_t(c.off_u + o / 2) * kernel_half_size(o, s) * (2 * s + 1);
}

// G * conj(C) summed, C = (cr, sign * ci) as the gridder adds it, from the four real sums.
__device__ inline float2 combine(float rr, float ii, float ir, float ri, bool conj) {
  const float sign = conj ? -1.0f : 1.0f;
  return make_float2(rr + sign * ii, ir - sign * ri);
}

__device__ inline void accumulate(float2 gv, float2 kv, float& rr, float& ii, float& ir, float& ri) {
  rr = fmaf(gv.x, kv.x, rr);
  ii = fmaf(gv.y, kv.y, ii);
  ir = fmaf(gv.y, kv.x, ir);
  ri = fmaf(gv.x, kv.y, ri);
}

// A lane's next point of a footprint of L x L points flattened over the warp: 32 further along.
__device__ inline void next_point(int& j, int& k, int L) {
  k += kWarp;
  while (k >= L) {
    k -= L;
    ++j;
  }
}

// The warp's total, in lane 0.
__device__ inline float2 warp_sum(float2 v) {
  for (int d = kWarp / 2; d > 0; d /= 2) {
    v.x += __shfl_down_sync(kFull, v.x, d);
    v.y += __shfl_down_sync(kFull, v.y, d);
  }
  return v;
}

// Each warp's visibility and update counts, summed per thread block into a.work (one atomic pair).
__device__ void add_work(const Args& a, double predicted, double updates) {
  for (int d = kWarp / 2; d > 0; d /= 2) {
    predicted += __shfl_down_sync(kFull, predicted, d);
    updates += __shfl_down_sync(kFull, updates, d);
  }
  if ((threadIdx.x & (kWarp - 1)) == 0 && predicted != 0) {
    atomicAdd(a.work, predicted);
    atomicAdd(a.work + 1, updates);
  }
}

__global__ void __launch_bounds__(kWarp* kWarpsPerBlock) gather_kernel(const Args a) {
  const int lane = threadIdx.x & (kWarp - 1), o = a.g.oversample;
  const std::int64_t N = a.g.grid_size, warps = std::int64_t(gridDim.x) * kWarpsPerBlock;
  double predicted = 0, updates = 0;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; i < a.n; i += warps) {
    GridCoord c;
    if (!coord_of(a, i, c)) {
      if (lane == 0) a.out[i] = make_float2(0, 0);
      continue;
    }
    const int s = c.support, L = 2 * s + 1, S = kernel_half_size(o, s);
    const float2* kern = a.kernels + a.start[c.plane];
    const float2* g0 = a.grid + (c.v - s) * N + (c.u - s);
    float rr = 0, ii = 0, ir = 0, ri = 0;
    int j = lane / L, k = lane % L;  // this lane's first footprint point, row j, column k
    for (int t = lane; t < L * L; t += kWarp) {
      const int iy = abs(c.off_v + (j - s) * o);
      accumulate(g0[j * N + k], kern[std::int64_t(iy) * S + abs(c.off_u + (k - s) * o)], rr, ii, ir, ri);
      next_point(j, k, L);
    }
    const float2 sum = warp_sum(combine(rr, ii, ir, ri, c.conj));
    if (lane == 0) a.out[i] = sum;
    predicted += lane == 0;
    updates += lane == 0 ? double(L) * L : 0.0;
  }
  add_work(a, predicted, updates);
}

using locality::shfl_coord;

// kernel_lookup linear: the runs of the two rows-layout offsets around the exact sub-sample
// offset fu, and the weight of the upper one (stages/shared/kernel_lookup.hpp's bilinear, by runs).
struct LinearRuns {
  const float2* lo;
  std::int64_t hi;  // offset of the upper offset's runs from lo
  float tu;
};
__device__ inline LinearRuns linear_runs(const Args& a, const GridCoord& c, float fu) {
  const int o = a.g.oversample, half = o / 2, s = c.support, S = kernel_half_size(o, s);
  const int off_lo = min(int(floorf(fu)), half - 1);
  return {a.kernels + a.start[c.plane] + std::int64_t(off_lo + half) * S * (2 * s + 1), std::int64_t(S) * (2 * s + 1),
          fu - float(off_lo)};
}
// C at footprint row j (0..2s), column k, bilinear between quarter rows and the two offsets' runs.
__device__ inline float2 linear_value(const LinearRuns& r, int S, int L, float fv, int j, int s, int o, int k) {
  const float y = fabsf(fv + float((j - s) * o));
  const int y0 = min(int(y), S - 1), y1 = min(y0 + 1, S - 1);
  const float ty = y - float(y0), tu = r.tu;
  const float2 a = __ldg(r.lo + std::int64_t(y0) * L + k), b = __ldg(r.lo + r.hi + std::int64_t(y0) * L + k);
  const float2 c = __ldg(r.lo + std::int64_t(y1) * L + k), d = __ldg(r.lo + r.hi + std::int64_t(y1) * L + k);
  const float w00 = (1 - ty) * (1 - tu), w01 = (1 - ty) * tu, w10 = ty * (1 - tu), w11 = ty * tu;
  return make_float2(w00 * a.x + w01 * b.x + w10 * c.x + w11 * d.x, w00 * a.y + w01 * b.y + w10 * c.y + w11 * d.y);
}

// kernel_lookup linear (the uvflow variant): a warp takes 32 consecutive visibilities, each lane
// loading (or placing) one; then passes of 32/G visibilities, G lanes each, G from the support of
// the pass's first one; each lane owns footprint columns and blends four table values per point.
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock) linear_kernel(const Args a) {
  const int lane = threadIdx.x & (kWarp - 1), o = a.g.oversample;
  const std::int64_t N = a.g.grid_size;
  const std::int64_t warp = std::int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const std::int64_t step = std::int64_t(gridDim.x) * kWarpsPerBlock * kWarp;
  double predicted = 0, updates = 0;
  for (std::int64_t c0 = warp * kWarp; c0 < a.n; c0 += step) {
    const int count = int(min(std::int64_t(kWarp), a.n - c0));
    GridCoord mine{};
    mine.support = -1;  // no visibility, or one off the grid: predicts 0
    if (lane < count && !coord_of(a, c0 + lane, mine)) mine.support = -1;
    float fu_mine = 0, fv_mine = 0;  // exact sub-sample offsets
    if (mine.support >= 0) {
      const double pos_u = -double(a.uu[c0 + lane]) * a.g.scale, pos_v = double(a.vv[c0 + lane]) * a.g.scale;
      fu_mine = float((round(pos_u) - pos_u) * o);
      fv_mine = float((round(pos_v) - pos_v) * o);
      predicted += 1;
      updates += double(2 * mine.support + 1) * (2 * mine.support + 1);
    }
    for (int p = 0; p < count;) {
      const int L0 = 2 * __shfl_sync(kFull, int(mine.support), p) + 1;
      const int G = L0 <= 8 ? 8 : (L0 <= 16 ? 16 : 32);  // warp-uniform
      const int src = p + lane / G, col = lane & (G - 1);
      const GridCoord c = shfl_coord(mine, src & (kWarp - 1));
      const float fu = __shfl_sync(kFull, fu_mine, src & (kWarp - 1));
      const float fv = __shfl_sync(kFull, fv_mine, src & (kWarp - 1));
      float rr = 0, ii = 0, ir = 0, ri = 0;
      if (src < count && c.support >= 0) {
        const int s = c.support, L = 2 * s + 1, S = kernel_half_size(o, s);
        const LinearRuns r = linear_runs(a, c, fu);
        const float2* g0 = a.grid + (c.v - s) * N + (c.u - s);
        for (int k = col; k < L; k += G)
          for (int j = 0; j < L; ++j) accumulate(__ldg(g0 + j * N + k), linear_value(r, S, L, fv, j, s, o, k), rr, ii, ir, ri);
      }
      float2 sum = combine(rr, ii, ir, ri, c.conj);
      for (int d = G / 2; d > 0; d /= 2) {
        sum.x += __shfl_xor_sync(kFull, sum.x, d);
        sum.y += __shfl_xor_sync(kFull, sum.y, d);
      }
      if (col == 0 && src < count) a.out[c0 + src] = c.support >= 0 ? sum : make_float2(0, 0);
      p += kWarp / G;
    }
  }
  add_work(a, predicted, updates);
}

// ---- uvflow (nearest lookup) ----
// The locality order and groups of stages/shared/locality_order.cuh: a warp degrids up to kGroup
// keys (cell and sub-cell offset: a key's visibilities share the prediction) of one plane at once,
// loading each grid value of their footprints' union once, into a register, and applying it to
// every member (one kernel load and 4 FMAs each), so the grid costs 8 / members bytes per update
// instead of 8. The members' sums are reduced over the warp together at the end.
// Sizes measured on el56-82 (bench/results/h100_degrid.md): at 24 warps per SM groups of up to 6
// (24.5 ms) beat 4, 5 and 8 (26.6, 25.5, 25.6 ms; 80 registers, a few spilled); 20 warps with 6
// took 25.6 ms, 16 warps with 8 26.2 ms; kSpanV 1 or 2 forms smaller groups and is slower. With
// the halving reduction (H200): groups of 7 20.0 ms against 19.3-19.4 for 6; kSpanV 3, 4, 5, 6, 8
// 19.22-19.43, 19.13-19.37, 19.11-19.29, 19.14-19.27, 19.10-19.26 ms (bigger groups, more rows
// outside each footprint). Per update a member still loads its kernel value from L1 or L2, and a
// point waits for the slowest of its loads: the walker is latency-bound at 7 warps a scheduler (28 an
// SM at 72 registers), not bound by the L1 data pipe (cutting its wavefronts by a fifth saved 0.6-4.5 %;
// every kernel value read from shared memory instead, with wrong values as an upper bound, 12 %: stop
// 38). Row offsets broadcast by shuffles or loads predicated on the footprint (11.4 % fewer global
// wavefronts, 17-18 more instructions a point) took 19.9-22.7 ms against 18.5-18.8 (stop 37).
constexpr int kGroup = 6, kSpanV = 5;
constexpr int kRowSlots = locality::row_slots(kGroup);
// Warps per walker block (one block per SM): on el56-82, 24 x 1 beat 16 x 1, 12 x 2 and 8 x 3 by
// 19-49 %, and 20 x 1 (96 registers) by 4 % (21.01 against 21.91 ms on the H200). With the cheaper
// loop and reduction of stop 35, 28 warps (72 registers, 40 bytes of spills) took 18.72-19.28 ms
// against 24's 18.98-19.48 (7 runs each, two calls), 32 warps (64 registers) 19.12-19.57.
constexpr int kWalkerWarps = 28;

using locality::kRowTile;
using locality::span_u;

// base[i] through the read-only path, its address the 64-bit base kept in registers plus i * 8 (two
// instructions): written as `__ldg(base + i)` NVVM folds base back into its own parts, and
// degrid_group's grid row (gcol + (y0 + yy) * N) became a 64-bit multiply and adds at every point.
__device__ __forceinline__ float2 load_at(const float2* base, int i) {
  float2 v;
  asm("{\n\t.reg .u64 at;\n\tmad.wide.s32 at, %2, 8, %3;\n\tld.global.nc.v2.f32 {%0, %1}, [at];\n\t}"
      : "=f"(v.x), "=f"(v.y)
      : "r"(i), "l"(base));
  return v;
}

// One halving step of the members' sums over the warp (degrid_group), n of n0 values left: lanes
// with bit d set keep the upper half, the others the lower, each adding its partner's.
template <int n, int n0>
__device__ __forceinline__ void halve_sums(float (&v)[n0], int lane) {
  if constexpr (n > 1) {
    constexpr int d = kWarp / 2 * n / n0;
    const bool upper = lane & d;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float keep = upper ? v[i + n / 2] : v[i], send = upper ? v[i] : v[i + n / 2];
      v[i] = keep + __shfl_xor_sync(kFull, send, d);
    }
    halve_sums<n / 2, n0>(v, lane);
  }
}

// A group of exactly K keys (gr.leaders: cells and sub-cell offsets; gr.members every lane at them,
// each holding its entry in `mine`, `idx`, and taking its key's prediction) of one plane, support
// s, whose footprints' union is W x H cells from (u_lo - s, v_lo - s). The warp walks the union:
// G lanes along a row (8, 16 or 32 by W), 32 / G rows at once, and per 32 rows stages in shared
// memory where each member's kernel row starts for every row: an offset into a.kernels (for this
// design the locality::ResidueTable, whose zero row is the row of every row outside the member's
// footprint, and whose rows' zero column the column of every column outside it). A point then costs
// one grid load for all members, one shared-memory read of the members' offsets (a broadcast of K
// ints) and per member one kernel load and 4 FMAs: no branch, no test and no index arithmetic but
// the column's between the loads.
template <int K>
__device__ void degrid_group(const Args& a, const GridCoord& mine, std::int32_t idx, const locality::Group& gr,
                             int plane_start, int (*rowp)[kRowSlots], locality::Member* memb) {
  const int lane = threadIdx.x & (kWarp - 1), o = a.g.oversample, s = gr.s, L = 2 * s + 1, S = kernel_half_size(o, s);
  const int u_lo = gr.u_lo, v_lo = gr.v_lo, W = gr.W, H = gr.H;
  const std::int64_t N = a.g.grid_size;
  const int G = W <= 8 ? 8 : (W <= 16 ? 16 : kWarp), R = kWarp / G;
  const int col = lane & (G - 1), row = lane / G;
  // K keys (gr.leaders) are walked; each member lane, a duplicate too, takes its key's prediction.
  const bool in = gr.members >> lane & 1;
  const int rank = __popc(gr.leaders & ((1u << (__ffs(gr.same) - 1)) - 1));
  locality::stage_members(gr.leaders, mine, u_lo, v_lo, s, o, plane_start, memb);
  // G * conj(C) (plain C for conjugated kernels: the members share conj) as two sums of FMAs, re +=
  // gr cr + gs ci, im += gs cr - gr ci with gs = sign gi: for conjugated kernels that is
  // conj(G) * conj(C), whose imaginary part is negated at the end (one multiply per grid value).
  const float sign = mine.conj ? -1.0f : 1.0f;  // every member's; lanes outside use none of it
  const float group_sign = __shfl_sync(kFull, sign, __ffs(gr.leaders) - 1);
  float2 acc[K];
#pragma unroll
  for (int m = 0; m < K; ++m) acc[m] = make_float2(0, 0);
  const int row_step = R * int(N);
  for (int x = col; x - col < W; x += G) {  // every lane takes part: the row tables are shared
    const bool on = x < W;
    const float2* gcol = a.grid + (v_lo - s) * N + (u_lo - s) + min(x, W - 1);
    int colofs[K];
#pragma unroll
    for (int m = 0; m < K; ++m)
      colofs[m] = unsigned(x - memb[m].du) < unsigned(L) ? residue_run_column(memb[m].cols, x - memb[m].du) : S;
    for (int y0 = 0; y0 < H; y0 += kRowTile) {
      const int rows = min(kRowTile, H - y0);
      locality::stage_rows<K>(memb, s, o, y0, rowp);
      if (on) {
        // The grid row a 32-bit offset stepped per row (load_at): as gcol + (y0 + yy) * N the row
        // was multiplied in 64 bits at every point, and the K = 6 loop was 63 instructions for 24
        // FMAs, now 55 with the sign above (H200, el56-82: 19.4-19.8 ms against 20.8-21.0).
        const float2* gtile = gcol + y0 * N;
        int goff = row * int(N);
#pragma unroll(K <= 2 ? 4 : (K <= 4 ? 2 : 1))
        for (int yy = row; yy < rows; yy += R, goff += row_step) {
          const float2 g = load_at(gtile, goff);
          const float gs = group_sign * g.y;
          int rp[locality::row_slots(K)];
          locality::read_row<K>(rowp[yy], rp);
#pragma unroll
          for (int m = 0; m < K; ++m) {
            const float2 kv = __ldg(a.kernels + (rp[m] + colofs[m]));
            acc[m].x = fmaf(gs, kv.y, fmaf(g.x, kv.x, acc[m].x));
            acc[m].y = fmaf(-g.x, kv.y, fmaf(gs, kv.x, acc[m].y));
          }
        }
      }
    }
  }
  // The 2K sums over the warp by halving: each step a lane keeps half its values and adds its
  // partner's of that half, so value i ends in lanes i * spread .. (i + 1) * spread - 1; 18
  // shuffles for K = 6 instead of 60 (H200, el56-82: 19.25-19.43 ms against 19.56-19.82).
  constexpr int n0 = int(std::bit_ceil(unsigned(2 * K))), spread = kWarp / n0;
  static_assert(n0 <= kWarp / 2);
  float v[n0];
#pragma unroll
  for (int i = 0; i < n0; ++i) v[i] = i < 2 * K ? (i % 2 ? acc[i / 2].y : acc[i / 2].x) : 0.0f;
  halve_sums<n0, n0>(v, lane);
#pragma unroll
  for (int d = spread / 2; d > 0; d /= 2) v[0] += __shfl_xor_sync(kFull, v[0], d);
  const float re = __shfl_sync(kFull, v[0], (2 * rank * spread) & (kWarp - 1));
  const float im = __shfl_sync(kFull, v[0], ((2 * rank + 1) * spread) & (kWarp - 1));
  if (in) a.out[idx] = make_float2(re, group_sign * im);
}

template <int K, int kMax>
__device__ void degrid_group_of(int n, const Args& a, const GridCoord& mine, std::int32_t idx,
                                const locality::Group& gr, int plane_start, int (*rowp)[kRowSlots],
                                locality::Member* memb) {
  if constexpr (K <= kMax) {
    if (n == K)
      degrid_group<K>(a, mine, idx, gr, plane_start, rowp, memb);
    else
      degrid_group_of<K + 1, kMax>(n, a, mine, idx, gr, plane_start, rowp, memb);
  }
}

// The walker: the warp's claims on the order, each lane one entry (those off the grid predict 0),
// then the entries by group.
__global__ void __launch_bounds__(kWarp* kWalkerWarps, 1)
    grouped_kernel(const Args a, const std::int32_t* table_start, const GridCoord* coords,
                   const locality::Entries order, int ranges, const std::int64_t* range_start,
                   unsigned long long* next) {
  __shared__ __align__(16) int rowp[kWalkerWarps][kRowTile][kRowSlots];
  __shared__ locality::Member memb[kWalkerWarps][kGroup];
  const int lane = threadIdx.x & (kWarp - 1), w = threadIdx.x / kWarp;
  double predicted = 0, updates = 0;
  locality::Claims claims(ranges);
  std::int64_t c0;
  int count;
  while (claims.next(ranges, range_start, next, c0, count)) {
    std::int32_t idx = -1;
    GridCoord mine = off_grid();
    if (lane < count) {
      idx = order[c0 + lane];
      mine = coords[idx];
      if (mine.plane < 0) a.out[idx] = make_float2(0, 0);
    }
    if (mine.plane >= 0) {
      predicted += 1;
      updates += double(2 * mine.support + 1) * (2 * mine.support + 1);
    }
    unsigned pending = __ballot_sync(kFull, mine.plane >= 0);
    while (pending) {
      const locality::Group gr = locality::next_group<kGroup, kSpanV>(pending, mine);
      degrid_group_of<1, kGroup>(__popc(gr.leaders), a, mine, idx, gr, table_start[gr.plane], rowp[w], memb[w]);
    }
  }
  add_work(a, predicted, updates);
}

// ---- scatter ----

struct Tiles {
  int ntu, ntv;  // tiles along u and v
};

__device__ inline void tile_span(const GridCoord& c, int& tu0, int& tu1, int& tv0, int& tv1) {
  tu0 = (c.u - c.support) / kTileU;
  tu1 = (c.u + c.support) / kTileU;
  tv0 = (c.v - c.support) / kTileV;
  tv1 = (c.v + c.support) / kTileV;
}

// Places every visibility once (or copies the coords of a placed block) and counts the
// (visibility, tile) pairs per tile; visibilities off the grid predict 0.
__global__ void scatter_count(const Args a, Tiles t, GridCoord* coords, std::uint32_t* counts) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < a.n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    GridCoord c;
    if (!coord_of(a, i, c)) c.plane = -1;
    coords[i] = c;
    if (c.plane < 0) continue;
    int tu0, tu1, tv0, tv1;
    tile_span(c, tu0, tu1, tv0, tv1);
    for (int tv = tv0; tv <= tv1; ++tv)
      for (int tu = tu0; tu <= tu1; ++tu) atomicAdd(counts + std::int64_t(tv) * t.ntu + tu, 1u);
  }
}

__global__ void scatter_fill(std::int64_t n, Tiles t, const GridCoord* coords, std::uint32_t* cursor,
                             std::int32_t* entries) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const GridCoord c = coords[i];
    if (c.plane < 0) continue;
    int tu0, tu1, tv0, tv1;
    tile_span(c, tu0, tu1, tv0, tv1);
    for (int tv = tv0; tv <= tv1; ++tv)
      for (int tu = tu0; tu <= tu1; ++tu)
        entries[atomicAdd(cursor + std::int64_t(tv) * t.ntu + tu, 1u)] = std::int32_t(i);
  }
}

// One thread block per tile, a warp per tile row, a lane per cell (held in registers).
__global__ void __launch_bounds__(kTileU* kTileV) scatter_kernel(const Args a, Tiles t, const GridCoord* coords,
                                                                 const std::uint32_t* offsets,
                                                                 const std::int32_t* entries) {
  const std::int64_t tile = blockIdx.x;
  const int lane = threadIdx.x & (kWarp - 1), row = threadIdx.x / kWarp, o = a.g.oversample;
  const std::uint32_t first = offsets[tile], last = offsets[tile + 1];
  if (first == last) return;
  const int N = a.g.grid_size;
  const int u = int(tile % t.ntu) * kTileU + lane, v = int(tile / t.ntu) * kTileV + row;
  const float2 cell = u < N && v < N ? a.grid[std::int64_t(v) * N + u] : make_float2(0, 0);
  for (std::uint32_t e = first; e < last; ++e) {
    const std::int32_t i = entries[e];
    const GridCoord c = coords[i];
    const int s = c.support, L = 2 * s + 1, j = v - (c.v - s), k = u - (c.u - s);
    if (j < 0 || j >= L) continue;  // warp-uniform: the row is outside this footprint
    float rr = 0, ii = 0, ir = 0, ri = 0;
    if (k >= 0 && k < L) accumulate(cell, rows_of(a, c)[abs(c.off_v + (j - s) * o) * L + k], rr, ii, ir, ri);
    const float2 sum = warp_sum(combine(rr, ii, ir, ri, c.conj));
    if (lane == 0) {
      atomicAdd(&a.out[i].x, sum.x);
      atomicAdd(&a.out[i].y, sum.y);
    }
  }
}

// Visibility and update counts of the block from the coordinates scatter placed.
__global__ void count_work(const Args a, const GridCoord* coords) {
  double predicted = 0, updates = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < a.n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const GridCoord c = coords[i];
    if (c.plane < 0) continue;
    predicted += 1;
    updates += double(2 * c.support + 1) * (2 * c.support + 1);
  }
  add_work(a, predicted, updates);
}

// ---- moving_window ----

__global__ void identity_order(std::int32_t* p, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    p[i] = std::int32_t(i);
}

// A warp per baseline run (its visibilities in time order: order[run_start[r] ...]). The window
// persists across runs: a tag is the cell's index in the read-only grid, so it stays valid.
__global__ void __launch_bounds__(kWarp* kWindowWarps) window_kernel(const Args a, const std::int32_t* order,
                                                                     const std::uint32_t* run_start,
                                                                     const std::uint32_t* run_length,
                                                                     const std::int32_t* num_runs) {
  __shared__ float2 cached[kWindowWarps][kWindow * kWindow];
  __shared__ std::uint32_t tag[kWindowWarps][kWindow * kWindow];
  const int lane = threadIdx.x & (kWarp - 1), w = threadIdx.x / kWarp, o = a.g.oversample;
  const int N = a.g.grid_size;
  for (int q = lane; q < kWindow * kWindow; q += kWarp) tag[w][q] = UINT_MAX;  // no cell has this index
  __syncwarp();
  const std::int64_t warps = std::int64_t(gridDim.x) * kWindowWarps, runs = *num_runs;
  double predicted = 0, updates = 0;
  for (std::int64_t r = std::int64_t(blockIdx.x) * kWindowWarps + w; r < runs; r += warps) {
    const std::uint32_t begin = run_start[r], end = begin + run_length[r];
    for (std::uint32_t e = begin; e < end; ++e) {
      const std::int32_t i = order[e];
      GridCoord c;
      if (!coord_of(a, i, c)) {
        if (lane == 0) a.out[i] = make_float2(0, 0);
        continue;
      }
      const int s = c.support, L = 2 * s + 1, u0 = c.u - s, v0 = c.v - s;
      const float2* kern = rows_of(a, c);
      const bool windowed = L <= kWindow;
      float rr = 0, ii = 0, ir = 0, ri = 0;
      int j = lane / L, k = lane % L;
      for (int t = lane; t < L * L; t += kWarp) {
        const int gu = u0 + k, gv = v0 + j;
        const std::uint32_t cell_index = std::uint32_t(gv) * std::uint32_t(N) + std::uint32_t(gu);
        float2 g;
        if (windowed) {
          const int slot = (gv & (kWindow - 1)) * kWindow + (gu & (kWindow - 1));
          if (tag[w][slot] == cell_index) {
            g = cached[w][slot];
          } else {
            g = a.grid[cell_index];
            cached[w][slot] = g;
            tag[w][slot] = cell_index;
          }
        } else {
          g = a.grid[cell_index];
        }
        accumulate(g, kern[abs(c.off_v + (j - s) * o) * L + k], rr, ii, ir, ri);
        next_point(j, k, L);
      }
      const float2 sum = warp_sum(combine(rr, ii, ir, ri, c.conj));
      if (lane == 0) {
        a.out[i] = sum;
        predicted += 1;
        updates += double(L) * L;
      }
      __syncwarp();  // the next visibility's lanes read slots this one's lanes wrote
    }
  }
  add_work(a, predicted, updates);
}

void cuda_check(cudaError_t e, const char* what) { device::check(e, "degrid.wproj (cuda)", what); }

class WprojDegridderCuda final : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    linear_ = p.kernel_lookup == "linear";
    if (linear_ && p.variant != "uvflow")
      throw ParamError("kernel_lookup", "linear is implemented by the cuda variant uvflow (and the cpu backend), not " +
                                            p.variant);
  }

  void prepare(PrepareContext& pc) override {
    if (pc.dry_run) return;
    design_ = design_of(params().variant);
    switch (design_) {
      case Design::gather:
        max_blocks_ = device::resident_blocks(reinterpret_cast<const void*>(gather_kernel), kWarp * kWarpsPerBlock);
        break;
      case Design::uvflow:
        if (linear_) {
          max_blocks_ = device::resident_blocks(reinterpret_cast<const void*>(linear_kernel), kWarp * kWarpsPerBlock);
        } else {
          walker_ = locality::walker_launch(reinterpret_cast<const void*>(grouped_kernel), kWalkerWarps);
          order_stream_ = device::Stream::create();
          for (auto& w : walker_streams_) w = device::Stream::create();
        }
        break;
      case Design::scatter:
        max_blocks_ = device::resident_blocks(reinterpret_cast<const void*>(scatter_fill), 256);
        break;
      case Design::moving_window:
        max_blocks_ = device::resident_blocks(reinterpret_cast<const void*>(window_kernel), kWarp * kWindowWarps);
        break;
    }
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto g = ctx.in(grid);
    auto ks = ctx.in(kernels);
    degrid_inputs::check(*block, *g, *ks, "degrid.wproj (cuda)");
    check_on_device(g->cells, "the model grid");
    check_on_device(block->uu, "the visibilities");
    // uvflow (nearest) makes its table from the quarter; linear_kernel reads the rows layout.
    const bool quarter = design_ == Design::gather || (design_ == Design::uvflow && !linear_);
    const Array<std::int64_t>& start = quarter ? ks->quarter_start : ks->rows_start;
    const Array<cfloat>& table = quarter ? ks->quarter : ks->rows;
    if (start.size() != std::size_t(ks->planes) || table.empty())
      throw InputError(std::string("degrid.wproj (cuda): the kernel stack has no ") + (quarter ? "quarter" : "rows") +
                       " layout: set kernels.wproj's layouts to " + (quarter ? "any" : "rows or all"));
    const bool placed = block->placed() && block->grid_size == ks->geom.grid_size;
    if (design_ == Design::moving_window) check_time_blocks(*block);
    const device::Stream& stream = ctx.stream();
    // uvflow (nearest): each block's walker on the next of two streams of the stage's own, which wait
    // only for the block's inputs and order, so that it starts on the SMs that the previous block's
    // walker leaves idle in its tail; `stream` waits for it before the block is handed on.
    const bool own_streams = design_ == Design::uvflow && !linear_;
    const device::Stream& run = own_streams ? walker_streams_[walker_turn_] : stream;
    if (work_.empty()) {
      work_ = Array<double>::device(2, stream);
      device::memset_zero(work_.data(), work_.bytes(), stream);
      ctx.add_work_on_device(work_);
      if (own_streams)
        for (auto& w : walker_streams_) w.wait(stream.record());
    }
    if (own_streams) {
      wait_for_device_input(*block, run);
      wait_for_device_input(*g, run);
      wait_for_device_input(*ks, run);
    }
    const std::int64_t n = std::int64_t(block->size());
    auto out = std::make_shared<VisBlock>(*block);
    out->vis = Array<cfloat>::device(block->size(), run);
    if (n > 0) {
      const Args a{Placement::of(*ks),
                   n,
                   placed ? block->coords.data() : nullptr,
                   block->uu.data(),
                   block->vv.data(),
                   block->ww.data(),
                   ks->support.data(),
                   start.data(),
                   reinterpret_cast<const float2*>(table.data()),
                   reinterpret_cast<const float2*>(g->cells.data()),
                   reinterpret_cast<float2*>(out->vis.data()),
                   work_.data()};
      auto s = static_cast<cudaStream_t>(stream.native());
      switch (design_) {
        case Design::gather: {
          const auto blocks = unsigned(std::min<std::int64_t>((n + kWarpsPerBlock - 1) / kWarpsPerBlock, max_blocks_));
          gather_kernel<<<blocks, kWarp * kWarpsPerBlock, 0, s>>>(a);
          device::check_launch("degrid.wproj: gather_kernel");
          break;
        }
        case Design::uvflow:
          if (linear_) {
            linear_kernel<<<grid_blocks(n, kWarp * kWarpsPerBlock), kWarp * kWarpsPerBlock, 0, s>>>(a);
            device::check_launch("degrid.wproj: linear_kernel");
          } else {
            grouped(a, *block, ks, stream, run);
          }
          break;
        case Design::scatter:
          scatter(a, *ks, stream);
          break;
        case Design::moving_window:
          moving_window(a, *block, stream);
          break;
      }
    }
    if (own_streams) {
      stream.wait(run.record());
      walker_turn_ ^= 1;
    }
    ctx.emit(model, out);
  }

 private:
  bool linear_ = false;
  // Runs of one baseline must be in time order after a stable sort by baseline: the block's
  // times must not decrease (io.simulate's and a time-ordered Measurement Set's order).
  static void check_time_blocks(const VisBlock& b) {
    const std::size_t n = b.size();
    if (b.antenna1.size() != n || b.antenna2.size() != n || b.time.size() != n)
      throw InputError("degrid.wproj (cuda): variant moving_window needs each visibility's antenna1, antenna2 and "
                       "time (block " + std::to_string(b.index) +
                       " has none: feed it blocks from io.simulate or io.read_ms, not from uvw.w_sort)");
    for (std::size_t i = 1; i < n; ++i)
      if (b.time[i] < b.time[i - 1])
        throw InputError("degrid.wproj (cuda): variant moving_window needs blocks in time order; block " +
                         std::to_string(b.index) + ", visibility " + std::to_string(i) + " is earlier than the one "
                         "before it");
  }

  unsigned grid_blocks(std::int64_t n, int threads) const {
    return unsigned(std::max<std::int64_t>(1, std::min<std::int64_t>((n + threads - 1) / threads, max_blocks_)));
  }

  // The locality order, then the walker on `run`; `stream` (the stage's) has waited for every walker
  // before this one.
  void grouped(const Args& a, const VisBlock& block, const std::shared_ptr<const KernelStack>& stack,
               const device::Stream& stream, const device::Stream& run) {
    auto s = static_cast<cudaStream_t>(run.native());
    Args at = a;  // the kernels in residue order, with zeros, and their own plane starts (table.start)
    const locality::ResidueTable::View table = table_.of(stack, order_stream_, stream, "degrid.wproj (cuda)");
    at.kernels = table.values;
    at.start = nullptr;
    locality::Order order;
    order.build({a.g, a.n, a.coords, a.uu, a.vv, a.ww, a.support, a.coords && block.cell_order}, block, *stack,
                walker_.ranges, order_stream_, run, "degrid.wproj (cuda)");
    grouped_kernel<<<unsigned(walker_.blocks), kWarp * kWalkerWarps, 0, s>>>(
        at, table.start, order.coords(), order.entries(), order.ranges(), order.range_start(), order.next());
    device::check_launch("degrid.wproj: grouped_kernel");
    order.release(run);
  }

  // Bucket the (visibility, tile) pairs by tile, then a thread block per tile. The pair count is
  // read back to size the bucket array (one wait for the device per block).
  void scatter(const Args& a, const KernelStack& ks, const device::Stream& stream) {
    auto s = static_cast<cudaStream_t>(stream.native());
    const int N = ks.geom.grid_size;
    const Tiles t{(N + kTileU - 1) / kTileU, (N + kTileV - 1) / kTileV};
    const std::int64_t ntiles = std::int64_t(t.ntu) * t.ntv;
    auto coords = Array<GridCoord>::device(a.n, stream);
    auto counts = Array<std::uint32_t>::device(ntiles + 1, stream);
    auto offsets = Array<std::uint32_t>::device(ntiles + 1, stream);
    device::memset_zero(counts.data(), counts.bytes(), stream);
    device::memset_zero(a.out, a.n * sizeof(float2), stream);
    scatter_count<<<grid_blocks(a.n, 256), 256, 0, s>>>(a, t, coords.data(), counts.data());
    device::check_launch("degrid.wproj: scatter_count");
    std::size_t bytes = 0;
    cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, counts.data(), offsets.data(), ntiles + 1, s), "scan size");
    auto temp = Array<std::uint8_t>::device(std::max<std::size_t>(bytes, 1), stream);
    cuda_check(cub::DeviceScan::ExclusiveSum(temp.data(), bytes, counts.data(), offsets.data(), ntiles + 1, s), "scan");
    std::uint32_t pairs = 0;
    device::copy(&pairs, offsets.data() + ntiles, sizeof pairs, device::Copy::device_to_host, stream);
    stream.synchronize();
    auto entries = Array<std::int32_t>::device(std::max<std::uint32_t>(pairs, 1), stream);
    device::copy(counts.data(), offsets.data(), counts.bytes(), device::Copy::device_to_device, stream);  // cursors
    scatter_fill<<<grid_blocks(a.n, 256), 256, 0, s>>>(a.n, t, coords.data(), counts.data(), entries.data());
    device::check_launch("degrid.wproj: scatter_fill");
    scatter_kernel<<<unsigned(ntiles), kTileU * kTileV, 0, s>>>(a, t, coords.data(), offsets.data(), entries.data());
    device::check_launch("degrid.wproj: scatter_kernel");
    count_work<<<grid_blocks(a.n, 256), 256, 0, s>>>(a, coords.data());
    device::check_launch("degrid.wproj: count_work");
    keep_until(stream.record(), {&coords, &counts, &offsets, &temp, &entries});
  }

  // Group by baseline on the device (a stable radix sort of baseline keys made on the host keeps
  // each baseline's visibilities in time order), run boundaries by run-length encoding, then a
  // warp per run.
  void moving_window(const Args& a, const VisBlock& block, const device::Stream& stream) {
    auto s = static_cast<cudaStream_t>(stream.native());
    const std::size_t n = std::size_t(a.n);
    if (a.g.grid_size > 65535)  // window tags are cell indices in 32 bits
      throw InputError("degrid.wproj (cuda): variant moving_window takes grids of up to 65535 cells a side, not " +
                       std::to_string(a.g.grid_size));
    std::int32_t antennas = 0;
    for (std::size_t i = 0; i < n; ++i) antennas = std::max({antennas, block.antenna1[i], block.antenna2[i]});
    ++antennas;
    if (std::int64_t(antennas) * antennas > std::int64_t(UINT32_MAX))
      throw InputError("degrid.wproj (cuda): moving_window: " + std::to_string(antennas) + " antennas");
    std::vector<std::uint32_t> host_keys(n);
    for (std::size_t i = 0; i < n; ++i)
      host_keys[i] = std::uint32_t(block.antenna1[i]) * std::uint32_t(antennas) + std::uint32_t(block.antenna2[i]);
    // Pageable source: the copy has read it when copy() returns.
    auto keys_a = Array<std::uint32_t>::device(n, stream), keys_b = Array<std::uint32_t>::device(n, stream);
    device::copy(keys_a.data(), host_keys.data(), n * sizeof(std::uint32_t), device::Copy::host_to_device, stream);
    auto order_a = Array<std::int32_t>::device(n, stream), order_b = Array<std::int32_t>::device(n, stream);
    identity_order<<<grid_blocks(a.n, 256), 256, 0, s>>>(order_a.data(), a.n);
    device::check_launch("degrid.wproj: identity_order");
    const int end_bit = std::max(1, int(std::bit_width(std::uint64_t(antennas) * antennas)));
    cub::DoubleBuffer<std::uint32_t> keys(keys_a.data(), keys_b.data());
    cub::DoubleBuffer<std::int32_t> order(order_a.data(), order_b.data());
    auto unique = Array<std::uint32_t>::device(n, stream), lengths = Array<std::uint32_t>::device(n, stream);
    auto starts = Array<std::uint32_t>::device(n, stream);
    auto runs = Array<std::int32_t>::device(1, stream);
    device::memset_zero(lengths.data(), lengths.bytes(), stream);  // the scan reads past the runs
    std::size_t sort_bytes = 0, rle_bytes = 0, scan_bytes = 0;
    cuda_check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, order, a.n, 0, end_bit, s), "sort size");
    cuda_check(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, keys_a.data(), unique.data(), lengths.data(),
                                                  runs.data(), a.n, s),
               "run-length size");
    cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, lengths.data(), starts.data(), a.n, s), "scan size");
    auto temp = Array<std::uint8_t>::device(std::max({sort_bytes, rle_bytes, scan_bytes, std::size_t(1)}), stream);
    cuda_check(cub::DeviceRadixSort::SortPairs(temp.data(), sort_bytes, keys, order, a.n, 0, end_bit, s), "sort");
    cuda_check(cub::DeviceRunLengthEncode::Encode(temp.data(), rle_bytes, keys.Current(), unique.data(),
                                                  lengths.data(), runs.data(), a.n, s),
               "run-length encode");
    cuda_check(cub::DeviceScan::ExclusiveSum(temp.data(), scan_bytes, lengths.data(), starts.data(), a.n, s), "scan");
    window_kernel<<<unsigned(max_blocks_), kWarp * kWindowWarps, 0, s>>>(a, order.Current(), starts.data(),
                                                                        lengths.data(), runs.data());
    device::check_launch("degrid.wproj: window_kernel");
    keep_until(stream.record(), {&keys_a, &keys_b, &order_a, &order_b, &unique, &lengths, &starts, &runs, &temp});
  }

  Design design_ = Design::uvflow;
  int max_blocks_ = 1;
  locality::WalkerLaunch walker_;
  device::Stream order_stream_;  // uvflow: the locality orders' (Order::build)
  device::Stream walker_streams_[2];  // uvflow: the walkers', in turn
  int walker_turn_ = 0;
  Array<double> work_;
  locality::ResidueTable table_;  // uvflow
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WprojDegridderCuda>(); }

}  // namespace uvflow::degrid_wproj
