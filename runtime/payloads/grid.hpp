// The uv grid and its geometry.
#pragma once

#include <algorithm>
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
  Array<cfloat> cells;  // [v][u], grid_size^2
  // [norm, gridded, skipped] next to the cells, so a device gridder never syncs to report them:
  // norm = sum of weight * sum Re(C) over gridded visibilities (double), gridded = visibilities
  // convolved onto the grid, skipped = visibilities whose footprint left the grid.
  Array<double> totals;

  static Grid zeros_on_host(const GridGeometry& g, std::shared_ptr<const Observation> obs);
  double norm() const { return totals[0]; }  // host grids only
  std::int64_t gridded() const { return std::int64_t(totals[1]); }
  std::int64_t skipped() const { return std::int64_t(totals[2]); }
  template <class F> void each_array(F&& f) { f(cells); f(totals); }
};

inline Grid Grid::zeros_on_host(const GridGeometry& g, std::shared_ptr<const Observation> obs) {
  Grid grid;
  grid.geom = g;
  grid.obs = std::move(obs);
  grid.cells = Array<cfloat>::host(std::size_t(g.grid_size) * g.grid_size);
  std::fill(grid.cells.begin(), grid.cells.end(), cfloat(0));
  grid.totals = Array<double>::host(3);
  std::fill(grid.totals.begin(), grid.totals.end(), 0.0);
  return grid;
}

}  // namespace uvflow
