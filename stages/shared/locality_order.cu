#include "stages/shared/locality_order.cuh"

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

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

// The order's runs and its ranges of equal work, in one thread block (a few hundred runs and ranges;
// one launch where there were five small kernels and a device scan). For a block in cell order
// (`coords` set) first each rank's start by bisection (rank = plane, `planes` off the grid;
// block_start[planes + 1] = n), then the runs laid end to end in the walkers' order: run_begin,
// run_end and Entries' walk_at and block_at. Otherwise the runs are plane_runs'. Then
// work_before[j], the updates before the j-th run, and range r = [range_start[r], range_start[r + 1])
// with next[r] at its start.
constexpr int kRunThreads = 512;
struct RunsAndRanges {
  std::int64_t n;
  int planes, ranges;
  const std::int32_t* support;
  const GridCoord* coords;  // a block in cell order; null: the runs are plane_runs'
  std::int32_t *block_start, *run_begin, *run_end, *walk_at, *block_at;
  std::int64_t *work_before, *range_start;
  unsigned long long* next;
};
__global__ void __launch_bounds__(kRunThreads) runs_and_ranges(const RunsAndRanges a) {
  using Scan = cub::BlockScan<long long, kRunThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int slots = a.planes + 1;
  if (a.coords) {
    for (int r = threadIdx.x; r <= a.planes + 1; r += blockDim.x) {
      std::int64_t lo = 0, hi = a.n;  // the first entry whose rank is r or more
      while (lo < hi) {
        const std::int64_t mid = (lo + hi) / 2;
        const int plane = a.coords[mid].plane, rank = plane < 0 ? a.planes : plane;
        if (rank < r)
          lo = mid + 1;
        else
          hi = mid;
      }
      a.block_start[r] = std::int32_t(lo);
    }
    __syncthreads();
  }
  long long work = 0, at = 0;  // before this tile of runs
  for (int base = 0; base < slots; base += blockDim.x) {
    const int j = base + threadIdx.x, slot = j < slots ? slot_at(j, slots) : 0, rank = slot == 0 ? a.planes : slot - 1;
    long long count = 0;
    if (j < slots)
      count = a.coords ? a.block_start[rank + 1] - a.block_start[rank] : a.run_end[slot] - a.run_begin[slot];
    long long cost = count * entry_cost(slot, a.support), before, start, tile_work, tile_count;
    Scan(scan).ExclusiveSum(cost, before, tile_work);
    __syncthreads();
    Scan(scan).ExclusiveSum(count, start, tile_count);
    __syncthreads();
    if (j < slots) {
      a.work_before[j] = work + before;
      if (a.coords) {
        a.run_begin[slot] = a.walk_at[j] = std::int32_t(at + start);
        a.run_end[slot] = std::int32_t(at + start + count);
        a.block_at[j] = a.block_start[rank];
      }
    }
    work += tile_work;
    at += tile_count;
  }
  if (threadIdx.x == 0) {
    a.work_before[slots] = work;
    if (a.coords) a.walk_at[slots] = std::int32_t(at);
  }
  __syncthreads();
  for (int r = threadIdx.x; r <= a.ranges; r += blockDim.x) {
    const std::int64_t target = work / a.ranges * r + work % a.ranges * r / a.ranges;
    int lo = 0, hi = slots;  // the last run whose work starts at or before the target
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (a.work_before[mid] <= target ? lo : hi) = mid;
    }
    const int slot = slot_at(lo, slots);
    const std::int64_t count = a.run_end[slot] - a.run_begin[slot];
    const std::int64_t into = min((target - a.work_before[lo]) / entry_cost(slot, a.support), count);
    const std::int64_t from = r == 0 ? 0 : (r == a.ranges ? a.n : (count == 0 ? a.n : a.run_begin[slot] + into));
    a.range_start[r] = from;
    if (r < a.ranges) a.next[r] = (unsigned long long)from;
  }
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
  auto s = static_cast<cudaStream_t>(stream.native());
  const std::int64_t n = src.n;
  if (n > INT32_MAX)
    throw InputError(std::string(who) + ": a block of " + std::to_string(n) +
                     " visibilities; the locality order indexes at most 2^31 - 1 (use smaller blocks)");
  const int slots = ks.planes + 1;
  work_before_ = Array<std::int64_t>::device(slots + 1, stream);
  runs_ = Array<std::int32_t>::device(2 * slots, stream);
  range_start_ = Array<std::int64_t>::device(ranges + 1, stream);
  next_ = Array<unsigned long long>::device(ranges, stream);
  RunsAndRanges rr{n, ks.planes, ranges, src.support, nullptr, nullptr, runs_.data(), runs_.data() + slots,
                   nullptr, nullptr, work_before_.data(), range_start_.data(), next_.data()};
  if (src.coords && src.cell_order) {
    // No sort and no entries: position i of the j-th run is entry block_at[j] + i - walk_at[j].
    block_start_ = Array<std::int32_t>::device(3 * (std::size_t(ks.planes) + 2), stream);
    rr.coords = src.coords;
    rr.block_start = block_start_.data();
    rr.walk_at = rr.block_start + ks.planes + 2;
    rr.block_at = rr.walk_at + ks.planes + 2;
    coords_ = src.coords;
    keys_ = nullptr;
    walk_at_ = rr.walk_at;
    block_at_ = rr.block_at;
    runs_count_ = slots;
  } else {
    sorted_on(src, ks, rr.run_begin, rr.run_end, stream, who);
  }
  runs_and_ranges<<<1, kRunThreads, 0, s>>>(rr);
  device::check_launch("locality order: runs_and_ranges");
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

void Order::release(const device::Stream& stream) {
  keep_until(stream.record(), {&placed_, &keys_a_, &keys_b_, &runs_, &block_start_, &work_before_, &range_start_,
                               &next_, &sort_temp_});
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
