// The device grid of the cuda gridders that add every block to one grid (grid.atomic,
// grid.moving_window, grid.tiled): in float, or with double sums (accumulate: double) in a double
// grid beside it that is rounded to the float one once, at the end.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

// A zeroed device grid; with `double_sums` also its zeroed double grid (cells64), 16 bytes a cell.
Grid device_grid(const GridGeometry& g, bool double_sums, const device::Stream& s);

// accumulate: double at the end of the run: cells64 rounded into cells, once. cells64 is then
// dropped unless mpi.reduce_grid needs it (more than one rank sums the ranks' double grids).
// Nothing when the grid has no double cells. `stage` names the caller in errors.
void round_double_sums(Grid& g, const device::Stream& s, const char* stage);

// Made in prepare() where the planner described the geometry, else from the first kernel stack
// (or, when no block came, at finish()), and emitted once at finish().
class DeviceGridSum {
 public:
  void prepare(const PrepareContext& pc, const Out<Grid>& out, bool double_sums) {
    double_sums_ = double_sums;
    if (const auto& g = pc.output(out).grid) grid_ = std::make_shared<Grid>(device_grid(*g, double_sums_, pc.stream));
  }

  // The grid to add `block` to; every kernel stack must have the grid's geometry.
  Grid& for_block(const VisBlock& block, const KernelStack& ks, const device::Stream& stream, const std::string& stage) {
    if (!grid_) grid_ = std::make_shared<Grid>(device_grid(ks.geom, double_sums_, stream));
    expect_geometry(*grid_, ks.geom, stage);
    if (!grid_->obs) grid_->obs = block.obs;
    return *grid_;
  }

  Grid* grid() { return grid_.get(); }  // null before the first block (or prepare's geometry)

  void finish(Context& ctx, const In<KernelStack>& kernels, const Out<Grid>& out, const char* stage) {
    if (!grid_) grid_ = std::make_shared<Grid>(device_grid(ctx.in(kernels)->geom, double_sums_, ctx.stream()));
    round_double_sums(*grid_, ctx.stream(), stage);
    ctx.emit(out, std::move(grid_));
  }

 private:
  bool double_sums_ = false;
  std::shared_ptr<Grid> grid_;
};

}  // namespace uvflow
