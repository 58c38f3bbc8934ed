// The visiting order and the groups shared by the two `uvflow` cuda designs that walk w-projection
// footprints in groups: degrid.wproj (a gather per group) and grid.atomic (its transpose, one
// atomic per union point). .cu files only.
//
// Each update needs one grid value and one kernel value; read from L2 for every visibility that
// is 16 bytes per update. Two things cut those reads:
//  1. Locality order: a block is visited in the order of a 64-bit key (w-plane, widest first, then
//     the Morton index of the cell, then the entry's index: stages/shared/locality_key.hpp),
//     radix-sorted on the device, so consecutive visibilities share a plane and lie close in uv.
//     The order is cut into ranges of equal kernel-point work, each shared by a few thread blocks
//     (one per SM), so the warps of an SM work on one plane and a patch of uv and reread its kernel
//     rows and grid rows from L1 (bench/results/h100_degrid.md).
//  2. Groups: a warp takes up to K visibilities of one plane and one sign of w whose cells lie
//     within span_u along u and kSpanV along v of the first (with every other at one of their cells
//     and sub-cell offsets: those share all their kernel values), and walks the union of their
//     footprints, each lane owning a column: one grid access per union point serves every member.
// The walkers' loops are written out in each kernel from Claims and next_group: the same loop
// behind a shared template taking the per-entry and per-group work as lambdas compiled to a
// degridder 27 % slower (31.3 against 24.4 ms on el56-82, fewer instructions, more stalls).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>

#include "runtime/buffer.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/device.hpp"
#include "runtime/payload.hpp"
#include "runtime/payloads/kernel_stack_builder.hpp"
#include "runtime/payloads/kernels.hpp"
#include "stages/shared/locality_key.hpp"
#include "stages/shared/placement.hpp"

namespace uvflow::locality {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarp = 32;
// Thread blocks per range of the order: on el56-82 (degridding) 132 ranges (one per block) took
// 33.5 ms, 33 ranges 28.6 ms, 16, 8 and 4 ranges 27.5-27.8 ms, one range for all 29.5 ms.
constexpr int kBlocksPerRange = 8;
constexpr int kRowTile = 32;  // union rows whose kernel-row offsets a warp stages at once

// Where the visibilities of a block are: placed coords (uvw.w_sort's), or null and the raw uvw
// to place them from; cell_order: the placed block is in cell order (VisBlock::cell_order).
struct Source {
  Placement g;
  std::int64_t n = 0;
  const GridCoord* coords = nullptr;
  const float *uu = nullptr, *vv = nullptr, *ww = nullptr;
  const std::int32_t* support = nullptr;
  bool cell_order = false;
};

// A block's entries in locality order: the sorted keys, each ending in its entry's index (a
// keys-only sort moves 8 bytes an entry and pass where keys and a separate index moved 12; on the
// H200 grid.atomic's el82-70 took 15.23-15.24 ms against 15.39-15.42, el56-82 22.42-22.46 against
// 22.61-22.88).
// A block in cell order has no keys: position i of run j (walker order) is entry block_at[j] + i -
// walk_at[j] (walk_at[runs] = n; empty runs share their start, and the search finds the last).
struct Entries {
  const std::uint64_t* keys;
  std::uint64_t index_mask;
  const std::int32_t *walk_at = nullptr, *block_at = nullptr;
  int runs = 0;
  __device__ std::int32_t operator[](std::int64_t i) const {
    if (keys) return key_index(keys[i], index_mask);
    int lo = 0, hi = runs;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (walk_at[mid] <= i ? lo : hi) = mid;
    }
    return std::int32_t(block_at[lo] + (i - walk_at[lo]));
  }
};

// A block's locality order on the device, its ranges and their claim counters. The caller launches
// its walker on `stream` after build(), then calls release().
class Order {
 public:
  // Keys, sort, plane runs, and `ranges` ranges of equal work. Raw blocks are placed here, into
  // coords() (placed blocks: coords() is theirs; src points into `block`). `who` names the stage in
  // errors. The work goes on `side`, a stream of the stage's own that waits only for `block` and `ks`:
  // on `stream` it would wait for the previous block's walker, while on `side` it runs in that
  // walker's tail, on the SMs it leaves idle (el56-82 on the H200: degrid.wproj 17.27-17.33 ms against
  // 18.46-18.70, grid.atomic 20.41-20.43 against 20.81-20.83; an order takes about 0.5 ms a block).
  // `stream` waits for it. A block in cell order is not sorted again: its planes' runs are found
  // by bisection and taken widest first (degrid.wproj, el56-82 on the H100: 16.50-17.00 ms against
  // 18.20-18.50 with the sort), with no entry array (Entries), in one kernel: in the degridding
  // benchmark the orders run while the forward chain still makes the model, off the
  // walkers' path (events around them on the H100, stop 46).
  void build(const Source& src, const Payload& block, const KernelStack& ks, int ranges, const device::Stream& side,
             const device::Stream& stream, const char* who);
  // The arrays are kept until the work queued on `stream` so far is done.
  void release(const device::Stream& stream);

  const GridCoord* coords() const { return coords_; }
  Entries entries() const { return {keys_, index_mask_, walk_at_, block_at_, runs_count_}; }
  const std::int64_t* range_start() const { return range_start_.data(); }
  unsigned long long* next() { return next_.data(); }
  int ranges() const { return ranges_; }

 private:
  void build_on(const Source& src, const KernelStack& ks, int ranges, const device::Stream& stream, const char* who);
  // The entries, sorted by key, and each plane's run in them (slot 0 off the grid, plane p at p + 1).
  void sorted_on(const Source& src, const KernelStack& ks, std::int32_t* run_begin, std::int32_t* run_end,
                 const device::Stream& stream, const char* who);

  const GridCoord* coords_ = nullptr;
  const std::uint64_t* keys_ = nullptr;
  std::uint64_t index_mask_ = 0;
  const std::int32_t *walk_at_ = nullptr, *block_at_ = nullptr;  // a block in cell order (Entries)
  int runs_count_ = 0;
  int ranges_ = 0;
  Array<GridCoord> placed_;
  Array<std::uint64_t> keys_a_, keys_b_;
  Array<std::int32_t> runs_, block_start_;  // block_start_: for a block in cell order, also walk_at and block_at
  Array<std::int64_t> work_before_, range_start_;
  Array<unsigned long long> next_;
  Array<std::uint8_t> sort_temp_;
};

// The table the walkers read kernel values from: each plane's quarter (S x S), every row in residue
// order (the columns ix = c mod o together, ascending in ix, c = 0 .. o-1), so that a footprint row
// of any sub-cell offset is two unit-stride runs (k below and above the centre) and a plane takes
// S (S + 1) values instead of the rows layout's (o + 1) S (2s + 1), 2.5 times fewer, which keeps more
// planes' rows in L1. Each row ends in a zero (column S, `residue_stride`), the value of a column
// outside a member's footprint in any of its rows, so the walkers' point loops need no test per
// member; a run of zeros at the start (one row of the widest plane) is the row of every row outside
// a member's footprint. Made on the device from the stack's quarter once per stack, which is held so
// that another stack cannot take its address and be mistaken for it.
__host__ __device__ constexpr int residue_stride(int S) { return S + 1; }
class ResidueTable {
 public:
  struct View {
    const float2* values;
    const std::int32_t* start;  // where plane p's rows start in `values` (the zero row at 0)
  };
  // Made on `side`, the stream of the stage's Order::build (the walker's stream waits for it there),
  // so that the first block's table is made beside the work the stage's first call waits for
  // (degridding: the model grid's transforms); made again for another stack, it first waits for
  // the walkers queued on `readers`, which read the old one. Throws InputError (naming `stage`) when
  // the table is too large for 32-bit offsets.
  View of(const std::shared_ptr<const KernelStack>& stack, const device::Stream& side, const device::Stream& readers,
          const char* stage);
  static constexpr int zero_row = 0;

 private:
  Array<cfloat> table_;
  Array<std::int32_t> start_;
  std::shared_ptr<const KernelStack> of_;
};

// How many walker blocks of `warps` warps fill the device once (one per SM: one block's warps share
// the SM's L1, from which kernel rows are reread; as much L1 as the block's shared memory leaves)
// and the ranges for them.
struct WalkerLaunch {
  int blocks = 0, ranges = 0;
};
WalkerLaunch walker_launch(const void* kernel, int warps);

__device__ inline GridCoord shfl_coord(const GridCoord& c, int src) {
  static_assert(sizeof(GridCoord) == sizeof(int4));
  int4 v;
  memcpy(&v, &c, sizeof v);
  v.x = __shfl_sync(kFull, v.x, src);
  v.y = __shfl_sync(kFull, v.y, src);
  v.z = __shfl_sync(kFull, v.z, src);
  v.w = __shfl_sync(kFull, v.w, src);
  GridCoord out;
  memcpy(&out, &v, sizeof out);
  return out;
}

// How far (cells) a member's u may lie from the group's first: the columns a footprint of L
// leaves free in its lane layout (8, 16 or a multiple of 32 lanes), so the union costs no more
// column passes than one footprint.
__device__ inline int span_u(int L) {
  const int lanes = L <= 8 ? 8 : (L <= 16 ? 16 : (L + kWarp - 1) / kWarp * kWarp);
  return (lanes - L) / 2;
}

// A warp's claims on the order: warps take 32 entries at a time from their block's range (a
// counter per range; the ranges hold equal work), so the warps of an SM work on near entries, one
// plane and a patch of uv, and reread the plane's kernel rows and the patch's grid rows from L1 (hit
// rate 46 % against 27 % with one counter for all, Nsight Compute on el56-82, degridding). A warp
// whose range is used up takes from the next ranges in turn.
struct Claims {
  int range, visited = 0;
  __device__ explicit Claims(int ranges) : range(int(std::int64_t(blockIdx.x) * ranges / gridDim.x)) {}
  // The warp's next entries [c0, c0 + count), count <= 32; false when every range is used up.
  __device__ __forceinline__ bool next(int ranges, const std::int64_t* range_start, unsigned long long* counters,
                                       std::int64_t& c0, int& count) {
    const int lane = threadIdx.x & (kWarp - 1);
    while (visited < ranges) {
      unsigned long long claimed = 0;
      if (lane == 0) claimed = atomicAdd(counters + range, (unsigned long long)kWarp);
      c0 = std::int64_t(__shfl_sync(kFull, claimed, 0));
      const std::int64_t end = range_start[range + 1];
      if (c0 < end) {
        count = int(min(std::int64_t(kWarp), end - c0));
        return true;
      }
      range = range + 1 == ranges ? 0 : range + 1;
      ++visited;
    }
    return false;
  }
};

// A group: the first pending entry of the warp (lane bits `pending`, each lane holding its entry in
// `mine`) and the pending ones of its plane and sign of w within span_u along u and kSpanV along v;
// removed from `pending`. Entries of one cell and sub-cell offset (`duplicates`: on el56-82 a short
// baseline keeps its cell and offset for many dumps) share every kernel value and grid point, so a
// group is up to kGroup such keys, each with all its duplicates: `leaders` holds the lowest lane of
// each key, `members` every lane, `same` (per lane) the lanes of its own key. Their support s, plane,
// and the union of their footprints: W x H cells from (u_lo - s, v_lo - s).
struct Group {
  unsigned members, leaders, same;
  int s, plane, u_lo, v_lo, W, H;
};
template <int kGroup, int kSpanV>
__device__ __forceinline__ Group next_group(unsigned& pending, const GridCoord& mine) {
  const int lane = threadIdx.x & (kWarp - 1);
  __syncwarp();  // the callers come here converged; the barrier lets the shuffles below take their converged path
  const GridCoord lead = shfl_coord(mine, __ffs(pending) - 1);
  const int s = lead.support, L = 2 * s + 1, su = span_u(L);
  const bool candidate = (pending >> lane & 1) && mine.plane == lead.plane && mine.conj == lead.conj &&
                         abs(mine.u - lead.u) <= su && abs(mine.v - lead.v) <= kSpanV;
  // The key: cell (u below 2^23, v below 2^24: any grid that fits in memory) and sub-cell offset (plane
  // and sign are the lead's); a lane outside, a key of its own (bit 63, which no cell's key has).
  const unsigned long long key =
      candidate ? (std::uint64_t(std::uint32_t(mine.u)) << 40 | std::uint64_t(std::uint32_t(mine.v)) << 16 |
                   std::uint64_t(std::uint8_t(mine.off_u)) << 8 | std::uint8_t(mine.off_v))
                : (1ull << 63 | unsigned(lane));
  const unsigned same = __match_any_sync(kFull, key);
  unsigned leaders = __ballot_sync(kFull, candidate && __ffs(same) - 1 == lane);
  if (__popc(leaders) > kGroup) {  // the first kGroup keys: clear them from a copy, drop what is left
    unsigned later = leaders;
#pragma unroll
    for (int k = 0; k < kGroup; ++k) later &= later - 1;
    leaders ^= later;
  }
  const unsigned members = __ballot_sync(kFull, candidate && (leaders >> (__ffs(same) - 1) & 1));
  pending &= ~members;
  const bool in = leaders >> lane & 1;  // duplicates lie on their leaders' cells
  const int u_lo = __reduce_min_sync(kFull, in ? mine.u : INT_MAX);
  const int u_hi = __reduce_max_sync(kFull, in ? mine.u : INT_MIN);
  const int v_lo = __reduce_min_sync(kFull, in ? mine.v : INT_MAX);
  const int v_hi = __reduce_max_sync(kFull, in ? mine.v : INT_MIN);
  return {members, leaders, same, s, lead.plane, u_lo, v_lo, u_hi - u_lo + L, v_hi - v_lo + L};
}

// A member of a group as its warp stages it in shared memory for the walk of the union of
// footprints from (u_lo - s, v_lo - s): its cell's offset (du, dv) in the union; union row y reads
// table row |a_row + y o| (clamped to S - 1) of the plane's table at `base`, and footprint column j
// its column residue_run_column(cols, j).
struct alignas(16) Member {
  int du, dv, a_row, base;
  ResidueRun cols;
};

// Member `rank` of a group (each member lane passes its own entry `mine`), staged in shared memory;
// plane_start: where the group's plane starts in the ResidueTable.
__device__ __forceinline__ void stage_members(unsigned members, const GridCoord& mine, int u_lo, int v_lo, int s,
                                              int o, int plane_start, Member* memb) {
  const int lane = threadIdx.x & (kWarp - 1);
  __syncwarp();  // the previous group's readers are done
  if (members >> lane & 1) {
    const int du = mine.u - u_lo, dv = mine.v - v_lo;
    memb[__popc(members & ((1u << lane) - 1))] =
        Member{du, dv, mine.off_v - (dv + s) * o, plane_start, residue_run(s, o, mine.off_u)};
  }
  __syncwarp();
}

// A row's staged offsets for K members, padded to whole 16-byte reads and writes.
__host__ __device__ constexpr int row_slots(int K) { return (K + 3) / 4 * 4; }

// For union rows y0 .. y0 + kRowTile - 1: where each of the K members' kernel rows starts (an
// offset into the table; ResidueTable::zero_row for rows outside its footprint, so also for every
// row past the union's last), so that a point's K offsets are one broadcast shared read.
template <int K, int kSlots>
__device__ __forceinline__ void stage_rows(const Member* memb, int s, int o, int y0, int (*rowp)[kSlots]) {
  static_assert(kRowTile == kWarp && kSlots % 4 == 0 && K <= kSlots);
  const int lane = threadIdx.x & (kWarp - 1), L = 2 * s + 1, S = kernel_half_size(o, s), y = y0 + lane;
  int row[row_slots(K)];
#pragma unroll
  for (int m = 0; m < row_slots(K); ++m) {
    if (m >= K) {  // padding of the last 16 bytes: read_row loads it, the walkers use none of it
      row[m] = ResidueTable::zero_row;
      continue;
    }
    const Member& p = memb[m];
    row[m] = unsigned(y - p.dv) < unsigned(L) ? p.base + min(abs(p.a_row + y * o), S - 1) * residue_stride(S)
                                              : ResidueTable::zero_row;
  }
  __syncwarp();  // the previous tile's readers are done
  // A lane's slots written 16 bytes at a time: written one int at a time, the lanes' stores of a
  // slot lie kSlots ints apart, an 8-way bank conflict for 8 slots (Nsight Compute on the degridder:
  // 86 % of the shared-store wavefronts were conflicts, in an L1 pipe 89 % busy).
#pragma unroll
  for (int q = 0; q < row_slots(K) / 4; ++q)
    *reinterpret_cast<int4*>(&rowp[lane][4 * q]) = make_int4(row[4 * q], row[4 * q + 1], row[4 * q + 2], row[4 * q + 3]);
  __syncwarp();
}

// Union row yy's staged offsets (stage_rows) for K members, read 16 bytes at a time (the compiler
// reads them one int at a time otherwise: 8 shared loads per point instead of 2 for K = 8).
template <int K, int kSlots>
__device__ __forceinline__ void read_row(const int (&staged)[kSlots], int (&rp)[row_slots(K)]) {
  static_assert(kSlots % 4 == 0 && K <= kSlots);
#pragma unroll
  for (int q = 0; q < row_slots(K) / 4; ++q) {
    const int4 r4 = *reinterpret_cast<const int4*>(&staged[4 * q]);
    rp[4 * q] = r4.x, rp[4 * q + 1] = r4.y, rp[4 * q + 2] = r4.z, rp[4 * q + 3] = r4.w;
  }
}

// A scheduling fence between a point's K kernel loads and their FMAs: at 80 registers ptxas issues
// the loads of a group of 6 to 8 members in two rounds (4 + 2 for 6; 2 + 6 or 4 + 3 for 7 and 8;
// grid.atomic's box groups from 4 on), the first members' FMAs between them, so such a point waited
// for two load latencies instead of one. A warp barrier keeps every load ahead of it; the caller's
// loop must be taken by the whole warp the same number of times. grid.atomic on the H200: el56-82
// 22.56-22.62 ms against 23.31-23.36, el30-56 56.0 against 60.0. degrid.wproj's groups of up to 6
// have their loads in one round without it.
__device__ __forceinline__ void loads_issued() { __syncwarp(); }

}  // namespace uvflow::locality
