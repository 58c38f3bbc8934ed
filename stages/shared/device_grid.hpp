// The grid a cuda gridder that adds every block to one device grid (grid.atomic,
// grid.moving_window) keeps: made in prepare() where the planner described the geometry, else from
// the first kernel stack (or, when no block came, at finish()), and emitted once at finish().
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

class DeviceGridSum {
 public:
  void prepare(const PrepareContext& pc, const Out<Grid>& out) {
    if (const auto& g = pc.output(out).grid) grid_ = std::make_shared<Grid>(Grid::zeros_on_device(*g, pc.stream));
  }

  // The grid to add `block` to; every kernel stack must have the grid's geometry.
  Grid& for_block(const VisBlock& block, const KernelStack& ks, const device::Stream& stream, const std::string& stage) {
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_device(ks.geom, stream));
    expect_geometry(*grid_, ks.geom, stage);
    if (!grid_->obs) grid_->obs = block.obs;
    return *grid_;
  }

  void finish(Context& ctx, const In<KernelStack>& kernels, const Out<Grid>& out) {
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_device(ctx.in(kernels)->geom, ctx.stream()));
    ctx.emit(out, std::move(grid_));
  }

 private:
  std::shared_ptr<Grid> grid_;
};

}  // namespace uvflow
