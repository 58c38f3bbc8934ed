#include "stages/tiles/bucket_sort.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "runtime/error.hpp"
#include "stages/shared/tiles.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::tiles_bucket_sort {
namespace {

// Chunks of the block, each with its own cursor per tile. Each tile's list holds ascending
// indices whatever the chunking, so the output never depends on it (nor on the thread count);
// the limits bound the cursor table (chunks x tiles) and keep chunks large enough to pay.
constexpr std::size_t kMinChunk = 16384, kMaxChunks = 64, kMaxCursors = std::size_t(1) << 22;

class BucketSort : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned(buckets.name); }

  void process(Context& ctx) override {
    auto vis = ctx.in(tiles_bucket_sort::vis);
    auto counts = ctx.in(tiles_bucket_sort::counts);
    check_inputs(*vis, *counts);
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
    ctx.emit(buckets, out);
  }

 private:
  bool pinned_ = false;
};

}  // namespace

void check_inputs(const VisBlock& vis, const TileCounts& counts) {
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

// Rates of the estimate (choose: auto): 2.3e7 visibilities/s per core on the VM, 5.2e9/s on the
// H100 (bench/results/cpu_gridders.md, h100.md, el56-82).
StageSpec spec() {
  return decl.spec({cpu_backend<BucketSort>(), UVFLOW_CUDA_BACKEND(make_cuda)},
                   [](const Params&, const PortShapes& in, const EstimateContext& c) {
                     return per_visibility_estimate(in, vis.name, c, 2.3e7, 5.2e9);
                   });
}

}  // namespace uvflow::tiles_bucket_sort
