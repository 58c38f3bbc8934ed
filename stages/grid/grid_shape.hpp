// What the gridders of this folder describe before the run: a grid of their kernel stack's
// geometry, which they then allocate in prepare() (where a producer described the stack).
#pragma once

#include <string>
#include <string_view>

#include "runtime/stage.hpp"

namespace uvflow {

inline PortShapes grid_shape(const PortShapes& in, std::string_view kernels_port, std::string_view grid_port) {
  auto it = in.find(kernels_port);
  if (it == in.end() || !it->second.grid) return {};
  const GridGeometry& g = *it->second.grid;
  return {{std::string(grid_port), PortShape{.nx = g.grid_size, .ny = g.grid_size, .grid = g}}};
}

}  // namespace uvflow
