// What every degridder checks before reading a block: the block's arrays agree, and the model grid
// is the one the kernel stack describes (a grid made for other kernels would be read with the
// wrong cell size and w-planes, silently).
#pragma once

#include <string>

#include "runtime/error.hpp"
#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::degrid_inputs {

inline void check_grid(const Grid& g, const KernelStack& ks, const std::string& who) {
  const GridGeometry &a = g.geom, &b = ks.geom;
  if (a.grid_size != b.grid_size || a.image_size != b.image_size || a.cell_rad != b.cell_rad)
    throw InputError(who + ": the model grid (" + std::to_string(a.grid_size) + " cells for " +
                     std::to_string(a.image_size) + " pixels of " + std::to_string(a.cell_rad) +
                     " rad) is not the kernels' (" + std::to_string(b.grid_size) + " cells for " +
                     std::to_string(b.image_size) + " pixels of " + std::to_string(b.cell_rad) + " rad)");
  if (g.cells.size() != std::size_t(a.grid_size) * a.grid_size)
    throw InputError(who + ": the model grid holds " + std::to_string(g.cells.size()) + " cells, its geometry says " +
                     std::to_string(std::size_t(a.grid_size) * a.grid_size));
}

inline void check(const VisBlock& block, const Grid& g, const KernelStack& ks, const std::string& who) {
  check_arrays(block);
  check_grid(g, ks, who);
}

}  // namespace uvflow::degrid_inputs
