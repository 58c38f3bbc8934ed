// grid.tiled: the fast CPU gridder (NAG memo sections 3.3-3.4 and 4.2-4.4): tiles of the grid
// gridded in parallel, each tile owned by one task, and a dense central box shared by all threads
// through thread-local copies.
//
//   in   buckets      TileBuckets, stream: per-tile visibility lists (tiles.bucket_sort) with the
//                     placed, w-sorted block they index
//        kernels      KernelStack, once: the `rows` layout, footprint sums, supports, geometry
//   out  grid         Grid, once (emitted at the end of the stream): single-precision cells,
//                     norm (double), gridded and skipped counts
//   params
//        variant      uvflow (default) | nvidia | nag: the design (cuda); the cpu backend has one
//        central_box  integer, tiles, default 2, range [-1, 100000]: radius W of the central box,
//                     the (2W+1)^2 tiles around the tile holding the grid centre; -1: none (cpu, nag)
//        entries_per_item, register_columns   uvflow: the most entries of one tile a warp takes at
//                     once; footprints at least this wide go to registers, narrower to shared memory
//                     (uvflow grids 32 x 16 or 32 x 32 tiles, nvidia 32 x 16, nag 32 x 32)
//        nag_blocks_per_tile, nag_blocks_per_central_tile    nag: blocks per tile (16 and 1000)
//   backends: cpu (serial over blocks, parallel within a block); cuda (stages/grid/tiled.cu).
#pragma once

#include <memory>

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec grid_tiled_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_grid_tiled_cuda();  // stages/grid/tiled.cu
#endif

}  // namespace uvflow
