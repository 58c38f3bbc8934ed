// Tile geometry shared by tiles.count, tiles.bucket_sort and the tiled gridders, both backends.
//
// Tile edges sit at centre - tile/2 + k*tile for every block and backend (centre = grid_size/2),
// so the grid centre is in the middle of one tile and every block tiles the grid the same way.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/host_device.hpp"
#include "runtime/payloads/tiles.hpp"

namespace uvflow {

// The smallest layout covering the inclusive cell range [u_min, u_max] x [v_min, v_max] (not
// empty) whose tile edges sit at grid_size/2 - tile/2 + k*tile.
TileLayout tile_layout(int u_min, int u_max, int v_min, int v_max, int grid_size, int tile_u, int tile_v);

// Inclusive ranges of tile indices that one visibility's footprint meets.
struct TileSpan {
  int tu0, tu1, tv0, tv1;
  UVFLOW_HD bool within(const TileLayout& l) const {
    return tu0 >= 0 && tv0 >= 0 && tu1 < l.ntiles_u && tv1 < l.ntiles_v;
  }
};

UVFLOW_HD inline int floor_div(int a, int b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

UVFLOW_HD inline TileSpan tiles_met(const TileLayout& l, const GridCoord& c) {
  return {floor_div(c.u - c.support - l.origin_u, l.tile_u), floor_div(c.u + c.support - l.origin_u, l.tile_u),
          floor_div(c.v - c.support - l.origin_v, l.tile_v), floor_div(c.v + c.support - l.origin_v, l.tile_v)};
}

// The most tiles a footprint of half-width `support` can meet in layout l: 2s+1 cells starting on
// the last cell of a tile span (tile + 2s - 1)/tile + 1 tiles along an axis.
inline std::int64_t max_tiles_met(const TileLayout& l, int support) {
  const auto along = [&](int tile, int ntiles) {
    return std::min<std::int64_t>((tile + 2 * support - 1) / tile + 1, ntiles);
  };
  return along(l.tile_u, l.ntiles_u) * along(l.tile_v, l.ntiles_v);
}

#ifdef __CUDACC__
// The per-tile counter update of the cuda backends of tiles.count and tiles.bucket_sort.
// Warp-collective (every lane of a full warp calls it): for each tile that footprint `c` meets
// (none unless `placed`), adds one to counter[tile] and calls at(tile, slot), slot being the
// counter's value before this lane's add. Lanes adding to one tile in the same step share one
// atomic and take consecutive slots in lane order: the short baselines put many of a warp's
// visibilities into the central tiles, where one atomic each would serialise on one address.
// A footprint that leaves the layout (coords from another block or grid) is skipped: a kernel
// cannot throw.
template <class Count, class At>
__device__ void add_to_tiles(const TileLayout& l, const GridCoord& c, bool placed, Count* counter, At&& at) {
  const TileSpan s = tiles_met(l, c);
  const int width = s.tu1 - s.tu0 + 1;
  const int m = placed && s.within(l) ? width * (s.tv1 - s.tv0 + 1) : 0;
  const unsigned lane = threadIdx.x % 32, below = (1u << lane) - 1;
  for (int k = 0; __any_sync(~0u, k < m); ++k) {
    const bool has = k < m;
    const int tile = has ? (s.tv0 + k / width) * l.ntiles_u + s.tu0 + k % width : -1;
    const unsigned peers = __match_any_sync(~0u, tile);
    if (!has) continue;
    const int leader = __ffs(peers) - 1;
    Count base = 0;
    if (int(lane) == leader) base = atomicAdd(counter + tile, Count(__popc(peers)));
    base = __shfl_sync(peers, base, leader);
    at(tile, base + Count(__popc(peers & below)));
  }
}
#endif

}  // namespace uvflow
