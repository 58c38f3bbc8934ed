// The uv grid and its geometry.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/payloads/geometry.hpp"
#include "runtime/payloads/vis.hpp"

namespace uvflow {

inline constexpr char kGrid[] = "Grid";
struct Grid : PayloadOf<Grid, kGrid> {
  GridGeometry geom;
  std::shared_ptr<const Observation> obs;
  Array<cfloat> cells;  // [v][u], grid_size^2
  // [norm, gridded, skipped] next to the cells, so a device gridder never syncs to report them:
  // norm = sum of weight * sum Re(C) over gridded visibilities (double), gridded = visibilities
  // convolved onto the grid, skipped = visibilities whose footprint left the grid.
  Array<double> totals;
  // The cells in double, before their rounding to `cells`, where a reduction over MPI ranks follows
  // a gridder that sums in double (grid.tiled's cpu backend, accumulate: double, in a run of several
  // ranks): the sum of these is rounded once, so that the grid does not depend on the number of
  // ranks. Empty otherwise.
  Array<cdouble> cells64;

  static Grid zeros_on_host(const GridGeometry& g, std::shared_ptr<const Observation> obs, bool pinned = false);
  // On the device, zeroed on `s` (in stream order: no wait).
  static Grid zeros_on_device(const GridGeometry& g, const device::Stream& s);
  double norm() const { return totals[0]; }  // host grids only
  std::int64_t gridded() const { return std::int64_t(totals[1]); }
  std::int64_t skipped() const { return std::int64_t(totals[2]); }
  template <class F> void each_array(F&& f) { f(cells); f(totals); f(cells64); }
};

inline Grid Grid::zeros_on_host(const GridGeometry& g, std::shared_ptr<const Observation> obs, bool pinned) {
  Grid grid;
  grid.geom = g;
  grid.obs = std::move(obs);
  grid.cells = Array<cfloat>::host(std::size_t(g.grid_size) * g.grid_size, pinned);
  std::fill(grid.cells.begin(), grid.cells.end(), cfloat(0));
  grid.totals = Array<double>::host(3);
  std::fill(grid.totals.begin(), grid.totals.end(), 0.0);
  return grid;
}

inline Grid Grid::zeros_on_device(const GridGeometry& g, const device::Stream& s) {
  Grid grid;
  grid.geom = g;
  grid.cells = Array<cfloat>::device(std::size_t(g.grid_size) * g.grid_size, s);
  device::memset_zero(grid.cells.data(), grid.cells.bytes(), s);
  grid.totals = Array<double>::device(3, s);
  device::memset_zero(grid.totals.data(), grid.totals.bytes(), s);
  return grid;
}

// A gridder makes its grid in prepare() from the geometry its kernels' producer described, or from
// the first kernel stack where none was described; every stack must then have that geometry.
inline void expect_geometry(const Grid& g, const GridGeometry& kernels, const std::string& stage) {
  if (!(g.geom == kernels))
    throw std::logic_error(stage + ": the kernel stack's grid (" + std::to_string(kernels.grid_size) + " cells for " +
                           std::to_string(kernels.image_size) + " pixels) differs from the one described before the run (" +
                           std::to_string(g.geom.grid_size) + " cells for " + std::to_string(g.geom.image_size) + ")");
}

}  // namespace uvflow
