#include "stages/tiles/count.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <vector>

#include "runtime/error.hpp"
#include "stages/uvw/w_sort.hpp"

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

namespace {

// An empty box gets an empty layout aligned like the others.
TileLayout box_layout(const BoundingBox& box, int grid_size, int tile_u, int tile_v) {
  if (!box.empty()) return tile_layout(box.u_min(), box.u_max(), box.v_min(), box.v_max(), grid_size, tile_u, tile_v);
  TileLayout l;
  l.tile_u = tile_u;
  l.tile_v = tile_v;
  l.origin_u = grid_size / 2 - tile_u / 2;
  l.origin_v = grid_size / 2 - tile_v / 2;
  return l;
}

class TileCount : public Stage {
 public:
  void configure(const Params& p) override {
    tile_u_ = int(p.integer("tile_u"));
    tile_v_ = int(p.integer("tile_v"));
  }
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned("counts"); }

  void process(Context& ctx) override {
    auto vis = ctx.in<VisBlock>("vis");
    auto box = ctx.in<BoundingBox>("box");
    check_placed(*vis);
    if (box->index != vis->index)
      throw InputError("box of block " + std::to_string(box->index) + " joined with block " + std::to_string(vis->index));
    auto out = std::make_shared<TileCounts>();
    out->index = vis->index;
    out->layout = box_layout(*box, vis->grid_size, tile_u_, tile_v_);
    const TileLayout& l = out->layout;
    const std::size_t tiles = std::size_t(l.count());
    out->counts = Array<std::int32_t>::host(tiles, pinned_);
    std::fill(out->counts.begin(), out->counts.end(), 0);
    out->active = Array<std::int32_t>::host(4, pinned_);
    const std::int32_t active[4] = {0, l.ntiles_u - 1, 0, l.ntiles_v - 1};  // the layout is the box
    std::copy(active, active + 4, out->active.begin());

    tbb::enumerable_thread_specific<std::vector<std::int32_t>> local([&] { return std::vector<std::int32_t>(tiles, 0); });
    const GridCoord* c = vis->coords.host_data();
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, vis->size(), 4096), [&](const tbb::blocked_range<std::size_t>& r) {
      std::int32_t* count = local.local().data();
      for (std::size_t i = r.begin(); i < r.end(); ++i) {
        if (c[i].plane < 0) continue;  // outside the grid (a block placed on the device)
        const TileSpan s = tiles_met(l, c[i]);
        if (!s.within(l))
          throw InputError("block " + std::to_string(vis->index) + ", visibility " + std::to_string(i) +
                           ": footprint leaves the bounding box (box and vis come from different blocks)");
        for (int tv = s.tv0; tv <= s.tv1; ++tv)
          for (int tu = s.tu0; tu <= s.tu1; ++tu) ++count[std::size_t(tv) * l.ntiles_u + tu];
      }
    });
    std::int32_t* counts = out->counts.data();
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, tiles, 1024), [&](const tbb::blocked_range<std::size_t>& r) {
      for (const auto& part : local)
        for (std::size_t t = r.begin(); t < r.end(); ++t) counts[t] += part[t];
    });
    ctx.add_work({.visibilities = double(vis->size())});
    ctx.emit("counts", out);
  }

 private:
  int tile_u_ = 64, tile_v_ = 64;
  bool pinned_ = false;
};

}  // namespace

StageSpec tiles_count_spec() {
  StageSpec s;
  s.type = "tiles.count";
  s.summary = "cover the grid with tiles and count the visibilities meeting each tile";
  s.doc =
      "Lays tiles of tile_u x tile_v cells with tile edges at grid_size/2 - tile/2 + k*tile, so that the grid "
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
      "Tested: cpu against a brute-force test of every (visibility, tile) pair, cuda against cpu tile by tile.";
  s.inputs = {{"vis", kVisBlock, Arity::stream, Residency::backend, "a block placed by uvw.w_sort"},
              {"box", kBoundingBox, Arity::stream, Residency::backend, "the same block's bounding box"}};
  s.outputs = {{"counts", kTileCounts, Arity::stream, Residency::backend,
                "tile layout, per-tile counts and the active tile range"}};
  s.params = {
      {.name = "tile_u", .type = ParamType::integer, .def = std::int64_t(64), .unit = "cells", .min = 1, .max = 4096,
       .doc = "tile width along u; 64 suits the CPU gridder (a 64 x 64 tile of the grid fits in L2)"},
      {.name = "tile_v", .type = ParamType::integer, .def = std::int64_t(64), .unit = "cells", .min = 1, .max = 4096,
       .doc = "tile height along v"}};
  s.backends = {{"cpu", [] { return std::make_unique<TileCount>(); }}};
  s.backends.push_back(UVFLOW_CUDA_BACKEND(make_tiles_count_cuda));
  s.concurrency = Concurrency::parallel;
  return s;
}

}  // namespace uvflow
