// The uv grid and its geometry.
#pragma once

#include <cstdint>

#include "runtime/payloads/vis.hpp"

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

inline constexpr char kGrid[] = "Grid";
struct Grid : PayloadOf<Grid, kGrid> {
  GridGeometry geom;
  std::shared_ptr<const Observation> obs;
  Array<cfloat> cells;          // [v][u], grid_size^2
  double norm = 0;              // sum of weight * sum Re(C) over gridded visibilities
  std::int64_t gridded = 0;     // visibilities convolved onto the grid
  std::int64_t skipped = 0;     // visibilities whose footprint left the grid
  template <class F> void each_array(F&& f) { f(cells); }
};

}  // namespace uvflow
