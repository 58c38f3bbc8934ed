#include "stages/shared/locality_order.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"

namespace uvflow::locality {
namespace {

__device__ inline bool coord_of(const Source& a, std::int64_t i, GridCoord& c) {
  if (a.coords) {
    c = a.coords[i];
    return c.plane >= 0;
  }
  return place(a.g, a.support, a.uu[i], a.vv[i], a.ww[i], c) == Placed::inside;
}

// Each entry's locality key; raw blocks are placed here, into `placed`.
__global__ void locality_keys(const Source a, GridCoord* placed, KeyLayout k, std::uint64_t* keys) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < a.n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    GridCoord c;
    if (!coord_of(a, i, c)) c = off_grid();
    if (placed) placed[i] = c;
    keys[i] = locality_key(k, c.plane, c.u, c.v, i);
  }
}

// Where each plane's run begins and ends in the sorted order: run_begin / run_end[plane + 1]
// (slot 0: off the grid; both zeroed beforehand, so empty planes have empty runs).
__global__ void plane_runs(const std::uint64_t* keys, std::int64_t n, KeyLayout k, std::int32_t* run_begin,
                           std::int32_t* run_end) {
  const auto plane = [&](std::int64_t i) { return key_plane(k, keys[i]); };
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int p = plane(i);
    if (i == 0 || plane(i - 1) != p) run_begin[p + 1] = std::int32_t(i);
    if (i == n - 1 || plane(i + 1) != p) run_end[p + 1] = std::int32_t(i + 1);
  }
}

// Cost of one entry of slot's run in kernel-point updates (an entry off the grid: 1).
__device__ inline std::int64_t entry_cost(int slot, const std::int32_t* support) {
  return slot == 0 ? 1 : std::int64_t(2 * support[slot - 1] + 1) * (2 * support[slot - 1] + 1);
}

// The runs in the order's order: off the grid first, then the planes from the last down.
__device__ inline int slot_at(int j, int slots) { return j == 0 ? 0 : slots - j; }

// work[j]: the updates of the j-th run of the order; work[slots] = 0, so its exclusive sum ends
// with the total.
__global__ void run_work(int slots, const std::int32_t* support, const std::int32_t* run_begin,
                         const std::int32_t* run_end, std::int64_t* work) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j <= slots; j += gridDim.x * blockDim.x) {
    const int slot = slot_at(j, slots);
    work[j] = j == slots ? 0 : (run_end[slot] - run_begin[slot]) * entry_cost(slot, support);
  }
}

// The order cut into `ranges` contiguous ranges of equal work (work_before: the exclusive sum of
// run_work): range r is [range_start[r], range_start[r + 1]); next[r] starts at its start.
__global__ void work_ranges(std::int64_t n, int slots, const std::int32_t* support, const std::int32_t* run_begin,
                            const std::int32_t* run_end, const std::int64_t* work_before, int ranges,
                            std::int64_t* range_start, unsigned long long* next) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r <= ranges; r += gridDim.x * blockDim.x) {
    const std::int64_t total = work_before[slots], target = total / ranges * r + total % ranges * r / ranges;
    int lo = 0, hi = slots;  // the last run whose work starts at or before the target
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (work_before[mid] <= target ? lo : hi) = mid;
    }
    const int slot = slot_at(lo, slots);
    const std::int64_t count = run_end[slot] - run_begin[slot];
    const std::int64_t into = min((target - work_before[lo]) / entry_cost(slot, support), count);
    const std::int64_t at = r == 0 ? 0 : (r == ranges ? n : (count == 0 ? n : run_begin[slot] + into));
    range_start[r] = at;
    if (r < ranges) next[r] = (unsigned long long)at;
  }
}

// A block in cell order (planes ascending, then the entries off the grid): where each rank's run
// begins, rank = plane (planes off the grid), by bisection; block_start[planes + 1] = n.
__global__ void rank_starts(const GridCoord* coords, std::int64_t n, int planes, std::int32_t* block_start) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r <= planes + 1; r += gridDim.x * blockDim.x) {
    std::int64_t lo = 0, hi = n;  // the first entry whose rank is r or more
    while (lo < hi) {
      const std::int64_t mid = (lo + hi) / 2;
      const int plane = coords[mid].plane, rank = plane < 0 ? planes : plane;
      if (rank < r)
        lo = mid + 1;
      else
        hi = mid;
    }
    block_start[r] = std::int32_t(lo);
  }
}

// The runs in the walkers' order (slot_at: off the grid first, then the planes from the last down),
// laid end to end: plane_runs' run_begin and run_end for a block in cell order, and Entries'
// walk_at and block_at (a few hundred runs: one thread).
__global__ void walker_runs(const std::int32_t* block_start, int planes, std::int32_t* run_begin,
                            std::int32_t* run_end, std::int32_t* walk_at, std::int32_t* block_at) {
  const int slots = planes + 1;
  std::int32_t at = 0;
  for (int j = 0; j < slots; ++j) {
    const int slot = slot_at(j, slots), rank = slot == 0 ? planes : slot - 1;
    run_begin[slot] = walk_at[j] = at;
    block_at[j] = block_start[rank];
    at += block_start[rank + 1] - block_start[rank];
    run_end[slot] = at;
  }
  walk_at[slots] = at;
}

// ResidueTable: each plane's quarter with each row in residue order and a zero after it; plane
// blockIdx.y (and on in steps of gridDim.y), its rows shared among the gridDim.x blocks of that
// plane. With one block a plane, the block of the widest plane made the table alone, one value per
// thread at a time (el56-82's: S^2 = 118k values for 256 threads).
constexpr int kResidueRowBlocks = 32;
__global__ void residue_rows(const float2* quarter, const std::int64_t* quarter_start, const std::int32_t* support,
                             const std::int32_t* table_start, int planes, int o, float2* table) {
  for (int p = blockIdx.y; p < planes; p += gridDim.y) {
    const int S = kernel_half_size(o, support[p]), stride = residue_stride(S);
    const std::int64_t from = quarter_start[p], to = table_start[p];
    for (int iy = blockIdx.x; iy < S; iy += gridDim.x)
      for (int ix = threadIdx.x; ix < stride; ix += blockDim.x)
        table[to + std::int64_t(iy) * stride + (ix < S ? residue_column(ix, o, S) : S)] =
            ix < S ? quarter[from + std::int64_t(iy) * S + ix] : float2{0, 0};
  }
}

// Where each plane starts: after the zero row, the planes' S (S + 1) values in turn (a few
// hundred planes: one thread).
__global__ void residue_starts(const std::int32_t* support, int planes, int o, int zero_row_size,
                               std::int32_t* start) {
  std::int32_t at = zero_row_size;
  for (int p = 0; p < planes; ++p) {
    const int S = kernel_half_size(o, support[p]);
    start[p] = at;
    at += S * residue_stride(S);
  }
}

unsigned helper_blocks(std::int64_t n) {
  static const int resident = device::resident_blocks(reinterpret_cast<const void*>(locality_keys), 256);
  return unsigned(std::max<std::int64_t>(1, std::min<std::int64_t>((n + 255) / 256, resident)));
}

}  // namespace

void Order::build(const Source& src, const Payload& block, const KernelStack& ks, int ranges,
                  const device::Stream& side, const device::Stream& stream, const char* who) {
  wait_for_device_input(block, side);
  wait_for_device_input(ks, side);
  build_on(src, ks, ranges, side, who);
  stream.wait(side.record());
}

void Order::build_on(const Source& src, const KernelStack& ks, int ranges, const device::Stream& stream,
                     const char* who) {
  const auto cuda_check = [who](cudaError_t e, const char* what) { device::check(e, who, what); };
  auto s = static_cast<cudaStream_t>(stream.native());
  const std::int64_t n = src.n;
  if (n > INT32_MAX)
    throw InputError(std::string(who) + ": a block of " + std::to_string(n) +
                     " visibilities; the locality order indexes at most 2^31 - 1 (use smaller blocks)");
  const int slots = ks.planes + 1;
  work_ = Array<std::int64_t>::device(slots + 1, stream);
  work_before_ = Array<std::int64_t>::device(slots + 1, stream);
  runs_ = Array<std::int32_t>::device(2 * slots, stream);
  std::int32_t *run_begin = runs_.data(), *run_end = runs_.data() + slots;
  if (src.coords && src.cell_order) {
    presorted_on(src, ks.planes, run_begin, run_end, stream);
  } else {
    sorted_on(src, ks, run_begin, run_end, stream, who);
  }
  // The order cut into ranges of equal work.
  std::size_t scan_bytes = 0;
  cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, work_.data(), work_before_.data(), slots + 1, s),
             "scan size");
  temp_ = Array<std::uint8_t>::device(std::max(scan_bytes, std::size_t(1)), stream);
  run_work<<<(slots + 256) / 256, 256, 0, s>>>(slots, src.support, run_begin, run_end, work_.data());
  device::check_launch("locality order: run_work");
  cuda_check(cub::DeviceScan::ExclusiveSum(temp_.data(), scan_bytes, work_.data(), work_before_.data(), slots + 1, s),
             "scan");
  range_start_ = Array<std::int64_t>::device(ranges + 1, stream);
  next_ = Array<unsigned long long>::device(ranges, stream);
  work_ranges<<<(ranges + 256) / 256, 256, 0, s>>>(n, slots, src.support, run_begin, run_end, work_before_.data(),
                                                   ranges, range_start_.data(), next_.data());
  device::check_launch("locality order: work_ranges");
  ranges_ = ranges;
}

void Order::sorted_on(const Source& src, const KernelStack& ks, std::int32_t* run_begin, std::int32_t* run_end,
                      const device::Stream& stream, const char* who) {
  const auto cuda_check = [who](cudaError_t e, const char* what) { device::check(e, who, what); };
  auto s = static_cast<cudaStream_t>(stream.native());
  const std::int64_t n = src.n;
  const KeyLayout k = key_layout(ks.geom.grid_size, ks.planes, n);
  placed_ = Array<GridCoord>::device(src.coords ? 0 : n, stream);
  keys_a_ = Array<std::uint64_t>::device(n, stream);
  keys_b_ = Array<std::uint64_t>::device(n, stream);
  locality_keys<<<helper_blocks(n), 256, 0, s>>>(src, src.coords ? nullptr : placed_.data(), k, keys_a_.data());
  device::check_launch("locality order: locality_keys");
  // The index bits need no sorting: the sort is stable and they start in order.
  cub::DoubleBuffer<std::uint64_t> keys(keys_a_.data(), keys_b_.data());
  std::size_t sort_bytes = 0;
  cuda_check(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, keys, n, k.index_bits, k.end_bit(), s), "sort size");
  sort_temp_ = Array<std::uint8_t>::device(std::max(sort_bytes, std::size_t(1)), stream);
  cuda_check(cub::DeviceRadixSort::SortKeys(sort_temp_.data(), sort_bytes, keys, n, k.index_bits, k.end_bit(), s),
             "sort");
  device::memset_zero(run_begin, 2 * (ks.planes + 1) * sizeof(std::int32_t), stream);  // empty planes: empty runs
  plane_runs<<<helper_blocks(n), 256, 0, s>>>(keys.Current(), n, k, run_begin, run_end);
  device::check_launch("locality order: plane_runs");
  coords_ = src.coords ? src.coords : placed_.data();
  keys_ = keys.Current();
  index_mask_ = k.index_mask();
}

void Order::presorted_on(const Source& src, int planes, std::int32_t* run_begin, std::int32_t* run_end,
                         const device::Stream& stream) {
  auto s = static_cast<cudaStream_t>(stream.native());
  const std::int64_t n = src.n;
  block_start_ = Array<std::int32_t>::device(3 * (std::size_t(planes) + 2), stream);
  std::int32_t *walk_at = block_start_.data() + planes + 2, *block_at = walk_at + planes + 2;
  rank_starts<<<(planes + 2 + 255) / 256, 256, 0, s>>>(src.coords, n, planes, block_start_.data());
  device::check_launch("locality order: rank_starts");
  walker_runs<<<1, 1, 0, s>>>(block_start_.data(), planes, run_begin, run_end, walk_at, block_at);
  device::check_launch("locality order: walker_runs");
  coords_ = src.coords;
  keys_ = nullptr;
  walk_at_ = walk_at;
  block_at_ = block_at;
  runs_count_ = planes + 1;
}

void Order::release(const device::Stream& stream) {
  keep_until(stream.record(), {&placed_, &keys_a_, &keys_b_, &runs_, &block_start_, &work_, &work_before_,
                               &range_start_, &next_, &temp_, &sort_temp_});
}

ResidueTable::View ResidueTable::of(const std::shared_ptr<const KernelStack>& stack, const device::Stream& side,
                                   const device::Stream& readers, const char* stage) {
  const KernelStack& ks = *stack;
  if (of_ != stack) {
    // The planes' rows grow by one value each; the support is on the device, so the table takes
    // the bound of S_max per plane for them (at most planes x S_max values more than it fills).
    const std::size_t S_max = std::size_t(kernel_half_size(ks.oversample, ks.max_support)),
                      zeros = residue_stride(int(S_max)),
                      values = zeros + ks.quarter.size() + std::size_t(ks.planes) * S_max;
    if (values > std::size_t(INT_MAX))
      throw InputError(std::string(stage) + ": the kernel stack has " + std::to_string(ks.quarter.size()) +
                       " kernel values, more than variant uvflow addresses (2^31); use fewer w-planes or oversample less");
    wait_for_device_input(ks, side);
    if (!table_.empty()) {  // the walkers queued may still read the old table
      side.wait(readers.record());
      keep_until(side.record(), {&table_, &start_});
    }
    table_ = Array<cfloat>::device(values, side);
    start_ = Array<std::int32_t>::device(std::size_t(ks.planes), side);
    const auto s = static_cast<cudaStream_t>(side.native());
    device::memset_zero(table_.data(), zeros * sizeof(cfloat), side);
    residue_starts<<<1, 1, 0, s>>>(ks.support.data(), ks.planes, ks.oversample, int(zeros), start_.data());
    device::check_launch("locality order: residue_starts");
    residue_rows<<<dim3(kResidueRowBlocks, unsigned(std::min(ks.planes, 65535))), 256, 0, s>>>(
        reinterpret_cast<const float2*>(ks.quarter.data()), ks.quarter_start.data(), ks.support.data(), start_.data(),
        ks.planes, ks.oversample, reinterpret_cast<float2*>(table_.data()));
    device::check_launch("locality order: residue_rows");
    of_ = stack;
  }
  return {reinterpret_cast<const float2*>(table_.data()), start_.data()};
}

WalkerLaunch walker_launch(const void* kernel, int warps) {
  device::check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 0), "locality walker",
                "carveout");
  WalkerLaunch l;
  l.blocks = device::resident_blocks(kernel, kWarp * warps);
  l.ranges = std::max(1, l.blocks / kBlocksPerRange);
  return l;
}

}  // namespace uvflow::locality
