// tiles.count: covers a block's bounding box with tiles and counts, per tile, the visibilities
// whose footprint meets it (NAG memo section 3.3, steps 2 and 3a).
//
//   in   vis     VisBlock, stream: placed by uvw.w_sort
//        box     BoundingBox, stream: the same block's bounding box (uvw.bounding_box)
//   out  counts  TileCounts, stream: the tile layout and per-tile counts [tv][tu]
//   params
//        tile_u  integer, cells, default 64, range [1, 4096]: tile width along u
//        tile_v  integer, cells, default 64, range [1, 4096]: tile height along v
//   backend: cpu (parallel within a block).
//
// Tile edges sit at centre - tile/2 + k*tile for every block (centre = grid_size/2), so the grid
// centre is in the middle of one tile and every block tiles the grid the same way.
#pragma once

#include "runtime/payloads/tiles.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec tiles_count_spec();

// Inclusive ranges of tile indices that one visibility's footprint meets.
struct TileSpan {
  int tu0, tu1, tv0, tv1;
  bool within(const TileLayout& l) const { return tu0 >= 0 && tv0 >= 0 && tu1 < l.ntiles_u && tv1 < l.ntiles_v; }
};

inline int floor_div(int a, int b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

inline TileSpan tiles_met(const TileLayout& l, const GridCoord& c) {
  return {floor_div(c.u - c.support - l.origin_u, l.tile_u), floor_div(c.u + c.support - l.origin_u, l.tile_u),
          floor_div(c.v - c.support - l.origin_v, l.tile_v), floor_div(c.v + c.support - l.origin_v, l.tile_v)};
}

}  // namespace uvflow
