#include "stages/tiles/count.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "stages/shared/tiles.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::tiles_count {

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

class TileCount : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned(tiles_count::counts.name); }

  void process(Context& ctx) override {
    auto vis = ctx.in(tiles_count::vis);
    auto box = ctx.in(tiles_count::box);
    check_inputs(*vis, *box);
    auto out = std::make_shared<TileCounts>();
    out->index = vis->index;
    out->layout = box_layout(*box, vis->grid_size, int(params().tile_u), int(params().tile_v));
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
    ctx.emit(tiles_count::counts, out);
  }

 private:
  bool pinned_ = false;
};

}  // namespace

void check_inputs(const VisBlock& vis, const BoundingBox& box) {
  check_placed(vis);
  const std::string block = "block " + std::to_string(vis.index);
  if (box.index != vis.index) throw InputError("box of block " + std::to_string(box.index) + " joined with " + block);
  if (box.range.size() != 4)
    throw InputError(block + ": the bounding box holds " + std::to_string(box.range.size()) + " values, not 4");
}

// Rates of the estimate (choose: auto): 4.7e7 visibilities/s per core on the VM, 9.7e9/s on the
// H100 (bench/results/cpu_gridders.md, h100.md, el56-82).
StageSpec spec() {
  return decl.spec({cpu_backend<TileCount>(), UVFLOW_CUDA_BACKEND(make_cuda)},
                   [](const Params&, const PortShapes& in, const EstimateContext& c) {
                     return per_visibility_estimate(in, vis.name, c, 4.7e7, 9.7e9);
                   });
}

}  // namespace uvflow::tiles_count
