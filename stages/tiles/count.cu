// tiles.count, cuda backend: the host cannot read the device-resident box, so the layout covers
// the whole grid (every placed footprint lies in it) and the box only sets the active tile range,
// on the device. One thread per visibility adds it to the tiles its footprint meets.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "runtime/error.hpp"
#include "stages/shared/tiles.hpp"
#include "stages/tiles/count.hpp"

namespace uvflow::tiles_count {
namespace {

constexpr int kThreads = 256;  // a multiple of the warp: add_to_tiles is warp-collective

__global__ void count_tiles(const TileLayout l, const GridCoord* coords, int n, std::int32_t* counts) {
  const std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const GridCoord c = i < n ? coords[i] : GridCoord{};
  add_to_tiles(l, c, i < n && c.plane >= 0, counts, [](int, std::int32_t) {});
}

// One thread: the tiles of box [u_min, u_max, v_min, v_max], clamped to the layout.
__global__ void active_tiles(const TileLayout l, const std::int32_t* box, std::int32_t* active) {
  if (box[0] > box[1] || box[2] > box[3]) {
    active[0] = 0, active[1] = -1, active[2] = 0, active[3] = -1;
    return;
  }
  const auto tile = [](int cell, int origin, int size, int ntiles) {
    return min(max(floor_div(cell - origin, size), 0), ntiles - 1);
  };
  active[0] = tile(box[0], l.origin_u, l.tile_u, l.ntiles_u);
  active[1] = tile(box[1], l.origin_u, l.tile_u, l.ntiles_u);
  active[2] = tile(box[2], l.origin_v, l.tile_v, l.ntiles_v);
  active[3] = tile(box[3], l.origin_v, l.tile_v, l.ntiles_v);
}

class TileCountCuda final : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto vis = ctx.in(tiles_count::vis);
    auto box = ctx.in(tiles_count::box);
    check_inputs(*vis, *box);
    const std::string block = "block " + std::to_string(vis->index);
    if (vis->size() > std::size_t(INT_MAX)) throw InputError(block + ": more than 2^31 visibilities in one block");
    check_on_device(vis->coords, block + " coords");
    check_on_device(box->range, block + " bounding box");
    const int n = int(vis->size()), grid = vis->grid_size;
    auto out = std::make_shared<TileCounts>();
    out->index = vis->index;
    const int tile_u = int(params().tile_u), tile_v = int(params().tile_v);
    out->layout = tile_layout(0, grid - 1, 0, grid - 1, grid, tile_u, tile_v);
    const TileLayout& l = out->layout;
    if (std::int64_t(l.ntiles_u) * l.ntiles_v > INT_MAX)
      throw InputError(block + ": a grid of " + std::to_string(grid) + " cells makes more than 2^31 tiles of " +
                       std::to_string(tile_u) + " x " + std::to_string(tile_v) + ": use larger tiles");

    const device::Stream& stream = ctx.stream();
    const auto raw = static_cast<cudaStream_t>(stream.native());
    out->counts = Array<std::int32_t>::device(std::size_t(l.count()), stream);
    device::memset_zero(out->counts.data(), out->counts.bytes(), stream);
    if (n > 0) {
      count_tiles<<<(n + kThreads - 1) / kThreads, kThreads, 0, raw>>>(l, vis->coords.data(), n, out->counts.data());
      device::check_launch("tiles.count: count_tiles launch");
    }
    out->active = Array<std::int32_t>::device(4, stream);
    active_tiles<<<1, 1, 0, raw>>>(l, box->range.data(), out->active.data());
    device::check_launch("tiles.count: active_tiles launch");
    ctx.add_work({.visibilities = double(n)});
    ctx.emit(tiles_count::counts, out);
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<TileCountCuda>(); }

}  // namespace uvflow::tiles_count
