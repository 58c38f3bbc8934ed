// The image and grid geometry, known before any data (kernels.wproj's parameters fix it), so that
// both the payloads and the shapes the planner propagates (runtime/stage.hpp) can carry it.
#pragma once

namespace uvflow {

// The image and grid sizes everything downstream of kernels.wproj agrees on.
struct GridGeometry {
  int image_size = 0;     // output image, pixels a side
  int grid_size = 0;      // padded uv grid, cells a side (even)
  double cell_rad = 0;    // image pixel size, radians
  // uv -> grid cells: pos_u = -uu * scale(), pos_v = vv * scale() (DESIGN.md conventions)
  double scale() const { return grid_size * cell_rad; }
  int centre() const { return grid_size / 2; }
  bool operator==(const GridGeometry&) const = default;
};

}  // namespace uvflow
