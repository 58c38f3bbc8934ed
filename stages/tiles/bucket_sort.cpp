#include "stages/tiles/bucket_sort.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "runtime/error.hpp"
#include "stages/tiles/count.hpp"
#include "stages/uvw/w_sort.hpp"

namespace uvflow {
namespace {

// Chunks of the block, each with its own cursor per tile. Each tile's list holds ascending
// indices whatever the chunking, so the output never depends on it (nor on the thread count);
// the limits bound the cursor table (chunks x tiles) and keep chunks large enough to pay.
constexpr std::size_t kMinChunk = 16384, kMaxChunks = 64, kMaxCursors = std::size_t(1) << 22;

class BucketSort : public Stage {
 public:
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned("buckets"); }

  void process(Context& ctx) override {
    auto vis = ctx.in<VisBlock>("vis");
    auto counts = ctx.in<TileCounts>("counts");
    bucket_sort::check_inputs(*vis, *counts);
    const std::string block = "block " + std::to_string(vis->index);
    const TileLayout& l = counts->layout;
    const std::size_t tiles = std::size_t(l.count()), n = vis->size();

    auto out = std::make_shared<TileBuckets>();
    out->index = vis->index;
    out->layout = l;
    out->vis = *vis;
    out->active = counts->active;
    out->offsets = Array<std::int64_t>::host(tiles + 1, pinned_);
    std::int64_t* offsets = out->offsets.data();
    offsets[0] = 0;
    for (std::size_t t = 0; t < tiles; ++t) offsets[t + 1] = offsets[t] + counts->counts[t];
    out->entries = Array<std::int32_t>::host(std::size_t(offsets[tiles]), pinned_);
    std::int32_t* entries = out->entries.data();

    const std::size_t max_chunks = std::clamp<std::size_t>(kMaxCursors / std::max<std::size_t>(tiles, 1), 1, kMaxChunks);
    const std::size_t chunks = std::min((n + kMinChunk - 1) / kMinChunk, max_chunks);
    const std::size_t chunk = chunks ? (n + chunks - 1) / chunks : 0;
    const GridCoord* c = vis->coords.host_data();
    std::vector<std::int64_t> cursor(chunks * tiles, 0);  // [chunk][tile]
    auto each_pair = [&](std::size_t k, auto&& f) {
      for (std::size_t i = k * chunk, end = std::min(n, i + chunk); i < end; ++i) {
        if (c[i].plane < 0) continue;  // outside the grid (a block placed on the device)
        const TileSpan s = tiles_met(l, c[i]);
        if (!s.within(l))
          throw InputError(block + ", visibility " + std::to_string(i) + ": footprint leaves the tile layout " +
                           "(counts and vis come from different blocks)");
        for (int tv = s.tv0; tv <= s.tv1; ++tv)
          for (int tu = s.tu0; tu <= s.tu1; ++tu) f(std::size_t(tv) * l.ntiles_u + tu, i);
      }
    };
    // Count per chunk, turn the counts into each chunk's first slot in every tile, then scatter.
    tbb::parallel_for(std::size_t(0), chunks, [&](std::size_t k) {
      std::int64_t* count = cursor.data() + k * tiles;
      each_pair(k, [&](std::size_t t, std::size_t) { ++count[t]; });
    });
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, tiles, 1024), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t t = r.begin(); t < r.end(); ++t) {
        std::int64_t slot = offsets[t];
        for (std::size_t k = 0; k < chunks; ++k) {
          const std::int64_t count = cursor[k * tiles + t];
          cursor[k * tiles + t] = slot;
          slot += count;
        }
        if (slot != offsets[t + 1])
          throw InputError(block + ": tile " + std::to_string(t) + " has " + std::to_string(offsets[t + 1] - offsets[t]) +
                           " visibilities in the counts but " + std::to_string(slot - offsets[t]) +
                           " in the block (counts and vis come from different blocks)");
      }
    });
    tbb::parallel_for(std::size_t(0), chunks, [&](std::size_t k) {
      std::int64_t* next = cursor.data() + k * tiles;
      each_pair(k, [&](std::size_t t, std::size_t i) { entries[next[t]++] = std::int32_t(i); });
    });
    ctx.add_work({.visibilities = double(n)});
    ctx.emit("buckets", out);
  }

 private:
  bool pinned_ = false;
};

}  // namespace

void bucket_sort::check_inputs(const VisBlock& vis, const TileCounts& counts) {
  check_placed(vis);
  const std::string block = "block " + std::to_string(vis.index);
  if (counts.index != vis.index)
    throw InputError("tile counts of block " + std::to_string(counts.index) + " joined with " + block);
  const std::size_t tiles = std::size_t(counts.layout.count());
  if (counts.counts.size() != tiles)
    throw InputError(block + ": tile counts hold " + std::to_string(counts.counts.size()) + " values for " +
                     std::to_string(tiles) + " tiles");
  if (vis.size() > std::size_t(INT32_MAX)) throw InputError(block + ": more than 2^31 visibilities in one block");
}

StageSpec tiles_bucket_sort_spec() {
  StageSpec s;
  s.type = "tiles.bucket_sort";
  s.summary = "list, per tile, the visibilities whose footprint meets it, in w-plane order";
  s.doc =
      "Bucket sort of a placed block into the tiles of tiles.count: offsets are the exclusive scan of the counts, "
      "and tile t's entries [offsets[t], offsets[t+1]) are the indices of the visibilities whose footprint meets it "
      "(visibilities marked off the grid, plane -1, are in no tile). A visibility meeting several tiles is listed "
      "in each. For a block sorted by uvw.w_sort, a tile's list in index order is in w-plane order, so consecutive "
      "visibilities of a tile share kernel planes in cache. The active tile range of the counts is passed on. "
      "cpu: parallel over chunks of the block with per-chunk cursors instead of atomics; each tile's entries "
      "ascend, and the output is the same whatever the thread count. "
      "cuda (Listing 5): the offsets are a CUB scan of the counts widened to 64 bits; one thread per visibility, "
      "in block order, takes a slot in each tile it meets with an atomic on that tile's cursor (a copy of the "
      "offsets), lanes of a warp meeting the same tile sharing one atomic and taking slots in block order, and "
      "writes the visibility to `entries` and the tile to `entry_tile` (for gridders that walk all entries in "
      "order, as NVIDIA's does: 001 memo 3.1; the cpu backend leaves it empty). Across warps the atomics decide, "
      "so each tile's list is only roughly in w-plane order and may differ from run to run; gridders do not "
      "depend on the order for correctness. Exact block order would need a stable radix sort of (tile, "
      "visibility) pairs over every slot allocated: several passes and twice the memory, for an order no gridder "
      "needs (their atomic write-backs are not deterministic either). The host does not know the total, so "
      "`entries` and `entry_tile` are allocated for n x (the most tiles a footprint of the block's max_support "
      "meets in this layout): device memory over-allocated, typically 2-4x, in exchange for no round trip to the "
      "host; only [0, offsets[count]) is filled. A kernel cannot throw: a slot past its tile's count (counts from "
      "another block) or past that bound (a support above max_support) is dropped. "
      "Tested: cpu against a brute-force test of every (visibility, tile) pair and across thread counts; cuda "
      "against cpu, tile by tile as sets.";
  s.inputs = {{"vis", kVisBlock, Arity::stream, Residency::backend, "a block placed and w-sorted by uvw.w_sort"},
              {"counts", kTileCounts, Arity::stream, Residency::backend, "the same block's tile layout and counts"}};
  s.outputs = {{"buckets", kTileBuckets, Arity::stream, Residency::backend,
                "per-tile visibility lists, with the block they index and the active tile range"}};
  s.backends = {{"cpu", [] { return std::make_unique<BucketSort>(); }}};
  s.backends.push_back(UVFLOW_CUDA_BACKEND(make_bucket_sort_cuda));
  s.concurrency = Concurrency::parallel;
  return s;
}

}  // namespace uvflow
