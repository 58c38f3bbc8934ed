// tiles.bucket_sort: lists, per tile, the visibilities whose footprint meets it (NAG memo
// section 3.3.1, with each tile's list in w-plane order as in section 4.2).
//
//   in   vis      VisBlock, stream: placed and w-sorted by uvw.w_sort
//        counts   TileCounts, stream: the same block's layout and counts (tiles.count)
//   out  buckets  TileBuckets, stream: offsets (exclusive scan of the counts), entries (indices
//                 into the block, ascending within each tile, hence in w-plane order), the block
//   backend: cpu (parallel within a block, deterministic); no parameters.
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec tiles_bucket_sort_spec();

}  // namespace uvflow
