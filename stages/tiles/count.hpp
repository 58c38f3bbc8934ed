// The tile geometry (tile_layout, tiles_met, ...) is shared with tiles.bucket_sort and the tiled
// gridders: stages/shared/tiles.hpp.
#pragma once

#include <memory>

#include "runtime/payloads/tiles.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::tiles_count {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "a block placed by uvw.w_sort"};
inline constexpr In<BoundingBox> box{.name = "box", .doc = "the same block's bounding box"};
inline constexpr Out<TileCounts> counts{.name = "counts", .doc = "tile layout, per-tile counts and the active tile range"};

struct Params {
  std::int64_t tile_u = 64;
  std::int64_t tile_v = 64;
};

inline const StageDecl<Params> decl{
    .type = "tiles.count",
    .summary = "cover the grid with tiles and count the visibilities meeting each tile",
    .doc = "Lays tiles of tile_u x tile_v cells with tile edges at grid_size/2 - tile/2 + k*tile, so that the grid "
    "centre lies in the middle of tile (centre_u, centre_v) and every block of a stream tiles the grid "
    "identically (the central box of grid.tiled is then the same cells for every block). Counts, per tile, the "
    "visibilities whose (2s+1)^2 footprint meets the tile; a visibility near a tile edge counts in each tile it "
    "meets; visibilities marked outside the grid (plane -1) count nowhere. `active` is the tile range holding "
    "the block's bounding box. "
    "cpu: the layout is the smallest covering the bounding box, so every tile is active; parallel over the "
    "block with per-thread counts. "
    "cuda: the box is on the device and the host never reads it, so the layout covers the whole grid (origin "
    "the last tile edge at or below cell 0, the last tile reaching cell grid_size-1) and the box's tiles are "
    "written to `active` on the device; one thread per visibility adds one to each tile its footprint meets "
    "with atomics, lanes of a warp meeting the same tile sharing one. A footprint outside the layout (coords from another grid) cannot "
    "raise an error in a kernel: it is not counted. "
    "Tested: cpu against a brute-force test of every (visibility, tile) pair, cuda against cpu tile by tile.",
    .inputs = {vis, box},
    .outputs = {counts},
    .params = {{&Params::tile_u,
                {.name = "tile_u", .unit = "cells", .min = 1, .max = 4096,
                 .doc = "tile width along u; 64 suits the CPU gridder (a 64 x 64 tile of the grid fits in L2)"}},
               {&Params::tile_v, {.name = "tile_v", .unit = "cells", .min = 1, .max = 4096, .doc = "tile height along v"}}},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/tiles/count.cu
#endif

// The checks both backends make: a placed block, its own bounding box of 4 values. Throws
// InputError naming the block.
void check_inputs(const VisBlock& vis, const BoundingBox& box);

}  // namespace uvflow::tiles_count
