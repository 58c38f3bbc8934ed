// tiles.bucket_sort: lists, per tile, the visibilities whose footprint meets it (NAG memo
// section 3.3.1, with each tile's list in w-plane order as in section 4.2).
//
//   in   vis      VisBlock, stream, backend residency: placed and w-sorted by uvw.w_sort
//        counts   TileCounts, stream, backend residency: the same block's layout and counts
//   out  buckets  TileBuckets, stream, backend residency: offsets (exclusive scan of the counts),
//                 entries (indices into the block), entry_tile (cuda: each entry's tile), the
//                 active tile range, the block
//   backends: cpu  per-chunk cursors, deterministic; each tile's entries ascending, hence in
//                  w-plane order
//             cuda atomic per-tile cursors (Listing 5); entries sized by a host-known bound, each
//                  tile's list only roughly in w-plane order; only in a build with CUDA
//   no parameters.
#pragma once

#include <memory>

#include "runtime/payloads/tiles.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec tiles_bucket_sort_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_bucket_sort_cuda();  // stages/tiles/bucket_sort.cu
#endif

namespace bucket_sort {
// The checks both backends make before sorting: a placed block, its own tile counts (same block
// index, one count per tile), fewer than 2^31 visibilities. Throws InputError naming the block.
void check_inputs(const VisBlock& vis, const TileCounts& counts);
}  // namespace bucket_sort

}  // namespace uvflow
