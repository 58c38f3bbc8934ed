// Tiling of the active grid (NAG memo sections 3.3-3.4): the bounding box of all footprints,
// the tile layout, per-tile counts and the bucket-sorted visibility lists.
#pragma once

#include <cstdint>

#include "runtime/payloads/vis.hpp"

namespace uvflow {

inline constexpr char kBoundingBox[] = "BoundingBox";
// Inclusive grid-cell range touched by the block's footprints, in an array so that a device
// stage computes it without a host round trip; empty when u_min > u_max.
struct BoundingBox : PayloadOf<BoundingBox, kBoundingBox> {
  std::int64_t index = 0;
  Array<std::int32_t> range;  // [u_min, u_max, v_min, v_max]
  // Host boxes only.
  int u_min() const { return range[0]; }
  int u_max() const { return range[1]; }
  int v_min() const { return range[2]; }
  int v_max() const { return range[3]; }
  bool empty() const { return u_min() > u_max() || v_min() > v_max(); }
  template <class F> void each_array(F&& f) { f(range); }
};

// Tiles of tile_u x tile_v cells; the grid centre sits in the middle of tile (centre_u, centre_v).
// Tile (tu, tv) covers u in [origin_u + tu*tile_u, +tile_u), v likewise.
struct TileLayout {
  int tile_u = 0, tile_v = 0;
  int origin_u = 0, origin_v = 0;
  int ntiles_u = 0, ntiles_v = 0;
  int centre_u = 0, centre_v = 0;
  int count() const { return ntiles_u * ntiles_v; }
};

inline constexpr char kTileCounts[] = "TileCounts";
// The layout covers the block's bounding box (cpu) or the whole grid (cuda: the box is on the
// device, and sizing the layout by it would need a round trip to the host). `active` is the
// inclusive tile range [tu0, tu1, tv0, tv1] that holds the block's footprints, where the data
// lives like `counts`, so later stages can limit themselves to it; empty when tu0 > tu1. The cpu
// layout is the box, so its active range is every tile: [0, ntiles_u-1, 0, ntiles_v-1].
struct TileCounts : PayloadOf<TileCounts, kTileCounts> {
  std::int64_t index = 0;
  TileLayout layout;
  Array<std::int32_t> counts;   // [tv][tu]: visibilities whose footprint meets the tile
  Array<std::int32_t> active;   // [tu0, tu1, tv0, tv1]
  template <class F> void each_array(F&& f) { f(counts); f(active); }
};

inline constexpr char kTileBuckets[] = "TileBuckets";
// Visibilities grouped by tile; one whose footprint meets several tiles is listed in each.
// `entries` may be longer than offsets[count()] (the cuda backend allocates a host-known upper
// bound); only [0, offsets[count()]) is meaningful.
struct TileBuckets : PayloadOf<TileBuckets, kTileBuckets> {
  std::int64_t index = 0;
  TileLayout layout;
  VisBlock vis;                 // the placed (w-sorted) block the entries index
  Array<std::int64_t> offsets;  // count()+1: tile t's entries are [offsets[t], offsets[t+1])
  Array<std::int32_t> entries;  // visibility indices into `vis`, in (about) w-plane order per tile
  Array<std::int32_t> entry_tile;  // the tile of each entry (cuda; the nvidia gridder reads it, as in its memo)
  Array<std::int32_t> active;   // TileCounts::active: the tile range holding entries
  template <class F> void each_array(F&& f) { vis.each_array(f); f(offsets); f(entries); f(entry_tile); f(active); }
  template <class F> void each_host_array(F&& f) { vis.each_host_array(f); }
};

}  // namespace uvflow
