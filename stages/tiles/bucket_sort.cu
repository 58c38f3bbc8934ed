// tiles.bucket_sort, cuda backend: Listing 5 of the NAG memo. The offsets are a CUB exclusive scan
// of the counts; a copy of them serves as per-tile cursors, and one thread per visibility (in
// block order) claims a slot in each tile its footprint meets with an atomic on that tile's
// cursor, writing the visibility and the tile there (the tile for gridders that walk all entries
// in order, as NVIDIA's does: 001 memo 3.1). The atomics leave a tile's entries in no fixed order;
// with order: visibility each tile's are then sorted (CUB's segmented sort): the buckets are the cpu
// backend's, and a gridder that sums them in order makes the same grid on every run. The entries
// are sized by a host-known bound, so nothing waits for the total.
#include <cuda_runtime.h>

#include <climits>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "stages/shared/tiles.hpp"
#include "stages/tiles/bucket_sort.hpp"

namespace uvflow::tiles_bucket_sort {
namespace {

constexpr int kThreads = 256;  // a multiple of the warp: add_to_tiles is warp-collective

// offsets[t] = counts[t] for t < tiles and 0 for t = tiles: their exclusive scan is the offsets,
// the last one the total. Widened first, so that the sum is taken in 64 bits.
__global__ void widen_counts(const std::int32_t* counts, int tiles, std::int64_t* offsets) {
  const std::int64_t t = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (t <= tiles) offsets[t] = t < tiles ? counts[t] : 0;
}

// A slot past the tile's count (counts from another block) or past the entries' bound (a support
// above the block's max_support) is dropped: a kernel cannot throw.
__global__ void scatter(const TileLayout l, const GridCoord* coords, int n, const std::int64_t* offsets,
                        unsigned long long* cursor, std::int64_t capacity, std::int32_t* entries,
                        std::int32_t* entry_tile) {
  const std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const GridCoord c = i < n ? coords[i] : GridCoord{};
  add_to_tiles(l, c, i < n && c.plane >= 0, cursor, [&](int tile, unsigned long long slot) {
    if (std::int64_t(slot) < offsets[tile + 1] && std::int64_t(slot) < capacity) {
      entries[slot] = std::int32_t(i);
      entry_tile[slot] = tile;
    }
  });
}

void cuda_check(cudaError_t e, const char* what) { device::check(e, "tiles.bucket_sort (cuda)", what); }

class BucketSortCuda final : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { by_visibility_ = p.order == "visibility"; }

  void process(Context& ctx) override {
    auto vis = ctx.in(tiles_bucket_sort::vis);
    auto counts = ctx.in(tiles_bucket_sort::counts);
    check_inputs(*vis, *counts);
    const std::string block = "block " + std::to_string(vis->index);
    const TileLayout& l = counts->layout;
    const int tiles = l.count();
    if (vis->max_support < 0) throw InputError(block + ": max_support is " + std::to_string(vis->max_support));
    check_on_device(vis->coords, block + " coords");
    check_on_device(counts->counts, block + " tile counts");

    const device::Stream& stream = ctx.stream();
    const auto raw = static_cast<cudaStream_t>(stream.native());
    const int n = int(vis->size());
    auto out = std::make_shared<TileBuckets>();
    out->index = vis->index;
    out->layout = l;
    out->vis = *vis;
    out->active = counts->active;
    out->offsets = Array<std::int64_t>::device(std::size_t(tiles) + 1, stream);
    widen_counts<<<tiles / kThreads + 1, kThreads, 0, raw>>>(counts->counts.data(), tiles, out->offsets.data());
    device::check_launch("tiles.bucket_sort: widen_counts launch");
    std::size_t bytes = 0;
    cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, out->offsets.data(), tiles + 1, raw), "scan size");
    auto temp = Array<std::uint8_t>::device(bytes, stream);
    cuda_check(cub::DeviceScan::ExclusiveSum(temp.data(), bytes, out->offsets.data(), tiles + 1, raw), "scan");

    // The host does not know the total, so the entries (and their tiles) take the most it can
    // be: every visibility meeting as many tiles as a footprint of max_support can. Device memory
    // is over-allocated, by that bound over the mean number of tiles met (typically 2-4x), in
    // exchange for no round trip to the host.
    const std::int64_t capacity = std::int64_t(n) * max_tiles_met(l, vis->max_support);
    out->entries = Array<std::int32_t>::device(std::size_t(capacity), stream);
    out->entry_tile = Array<std::int32_t>::device(std::size_t(capacity), stream);
    auto cursor = Array<std::int64_t>::device(std::size_t(tiles), stream);
    auto sorted = Array<std::int32_t>::device(by_visibility_ ? std::size_t(capacity) : 0, stream);
    auto sort_temp = Array<std::uint8_t>::device(0, stream);
    if (n > 0 && capacity > 0) {
      device::copy(cursor.data(), out->offsets.data(), cursor.bytes(), device::Copy::device_to_device, stream);
      scatter<<<(n + kThreads - 1) / kThreads, kThreads, 0, raw>>>(
          l, vis->coords.data(), n, out->offsets.data(), reinterpret_cast<unsigned long long*>(cursor.data()),
          capacity, out->entries.data(), out->entry_tile.data());
      device::check_launch("tiles.bucket_sort: scatter launch");
    }
    if (by_visibility_ && n > 0 && capacity > 0) {
      // Each tile's entries in increasing visibility index (unique within a tile). Entries past the
      // total are in no segment: CUB leaves them alone, so the capacity can stand for the total.
      cub::DoubleBuffer<std::int32_t> keys(out->entries.data(), sorted.data());
      std::size_t sort_bytes = 0;
      cuda_check(cub::DeviceSegmentedSort::SortKeys(nullptr, sort_bytes, keys, capacity, tiles, out->offsets.data(),
                                                    out->offsets.data() + 1, raw),
                 "segmented sort size");
      sort_temp = Array<std::uint8_t>::device(sort_bytes, stream);
      cuda_check(cub::DeviceSegmentedSort::SortKeys(sort_temp.data(), sort_bytes, keys, capacity, tiles, out->offsets.data(),
                                                    out->offsets.data() + 1, raw),
                 "segmented sort");
      if (keys.Current() == sorted.data()) std::swap(out->entries, sorted);
    }
    // The scratch arrays are released only after the scan, the scatter and the sort have used them.
    keep_until(stream.record(), {&temp, &cursor, &sorted, &sort_temp});
    ctx.add_work({.visibilities = double(n)});
    ctx.emit(buckets, out);
  }

 private:
  bool by_visibility_ = false;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<BucketSortCuda>(); }

}  // namespace uvflow::tiles_bucket_sort
