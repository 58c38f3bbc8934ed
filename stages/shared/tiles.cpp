#include "stages/shared/tiles.hpp"

namespace uvflow {

TileLayout tile_layout(int u_min, int u_max, int v_min, int v_max, int grid_size, int tile_u, int tile_v) {
  TileLayout l;
  l.tile_u = tile_u;
  l.tile_v = tile_v;
  const int centre = grid_size / 2;
  const int edge_u = centre - tile_u / 2, edge_v = centre - tile_v / 2;
  const int first_u = floor_div(u_min - edge_u, tile_u), first_v = floor_div(v_min - edge_v, tile_v);
  l.origin_u = edge_u + first_u * tile_u;
  l.origin_v = edge_v + first_v * tile_v;
  l.ntiles_u = floor_div(u_max - l.origin_u, tile_u) + 1;
  l.ntiles_v = floor_div(v_max - l.origin_v, tile_v) + 1;
  l.centre_u = -first_u;
  l.centre_v = -first_v;
  return l;
}

}  // namespace uvflow
