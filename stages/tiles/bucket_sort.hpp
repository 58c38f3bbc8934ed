#pragma once

#include <memory>

#include "runtime/payloads/tiles.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::tiles_bucket_sort {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "a block placed and w-sorted by uvw.w_sort"};
inline constexpr In<TileCounts> counts{.name = "counts", .doc = "the same block's tile layout and counts"};
inline constexpr Out<TileBuckets> buckets{
    .name = "buckets", .doc = "per-tile visibility lists, with the block they index and the active tile range"};

struct Params {
  std::string order = "any";
};

inline const StageDecl<Params> decl{
    .type = "tiles.bucket_sort",
    .summary = "list, per tile, the visibilities whose footprint meets it, in w-plane order",
    .doc = "Bucket sort of a placed block into the tiles of tiles.count: offsets are the exclusive scan of the counts, "
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
    "depend on the order for correctness, but their float sums do. With `order: visibility` each tile's "
    "entries are then sorted (CUB's segmented sort), the cpu backend's order: grid.tiled's uvflow variant with "
    "accumulate: double then makes the same grid on every run and for any split of the blocks over MPI ranks. "
    "The host does not know the total, so "
    "`entries` and `entry_tile` are allocated for n x (the most tiles a footprint of the block's max_support "
    "meets in this layout): device memory over-allocated, typically 2-4x, in exchange for no round trip to the "
    "host; only [0, offsets[count]) is filled. A kernel cannot throw: a slot past its tile's count (counts from "
    "another block) or past that bound (a support above max_support) is dropped. "
    "Tested: cpu against a brute-force test of every (visibility, tile) pair and across thread counts; cuda "
    "against cpu, tile by tile as sets, and with order: visibility in the cpu's order.",
    .inputs = {vis, counts},
    .outputs = {buckets},
    .params = {{&Params::order,
                {.name = "order",
                 .choices = {"any", "visibility"},
                 .doc = "cuda: the order of a tile's entries. any: as the scatter's atomics leave them; visibility: "
                        "in increasing visibility index (w-plane order), the cpu backend's, by a segmented sort after "
                        "the scatter: reproducible grids (with grid.tiled accumulate: double) at a cost, on the H100 "
                        "for EL56-82's four blocks, of 70-230 ms of device time against 6-10 (end to end 133-152 "
                        "ms against 85-89). The cpu backend's entries always ascend"}}},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/tiles/bucket_sort.cu
#endif

// The checks both backends make before sorting: a placed block, its own tile counts (same block
// index, one count per tile), fewer than 2^31 visibilities. Throws InputError naming the block.
void check_inputs(const VisBlock& vis, const TileCounts& counts);

}  // namespace uvflow::tiles_bucket_sort
