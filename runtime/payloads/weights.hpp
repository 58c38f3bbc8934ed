// The weight density of a visibility set: the summed visibility weight per cell of WSClean's
// weighting grid (uvw.weight_density), from which uvw.weighting derives uniform and Briggs
// imaging weights.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/host_device.hpp"
#include "runtime/payloads/vis.hpp"

namespace uvflow {

// WSClean's ImageWeights grid: `width` cells a side, each 1 / (width * cell_rad) wavelengths, of
// which only the half v >= 0 is kept (a visibility and its conjugate share a cell).
struct WeightGridGeometry {
  int width = 0;        // even
  double cell_rad = 0;  // image pixel size the grid is made for
  std::int64_t cells() const { return std::int64_t(width) * (width / 2); }
  bool operator==(const WeightGridGeometry&) const = default;
};

// Cell index of (u, v) in wavelengths, as WSClean's ImageWeights::uvToXY and isWithinLimits:
// (u, v) -> (-u, -v) when v < 0, x = floor(u * width * cell + width/2), y = floor(v * width * cell),
// kept when 0 <= x < width and y < width/2. -1 outside the grid or for non-finite (u, v).
UVFLOW_HD inline std::int64_t weight_cell(const WeightGridGeometry& g, double u, double v) {
  if (v < 0.0) {
    u = -u;
    v = -v;
  }
  const double x = floor(u * g.width * g.cell_rad + g.width / 2);
  const double y = floor(v * g.width * g.cell_rad);
  // Written so that NaN fails every test, and decided before any conversion to an integer.
  if (!(x >= 0.0 && x < double(g.width) && y < double(g.width / 2))) return -1;
  return std::int64_t(y) * g.width + std::int64_t(x);
}

inline constexpr char kWeightDensity[] = "WeightDensity";
struct WeightDensity : PayloadOf<WeightDensity, kWeightDensity> {
  WeightGridGeometry geom;
  std::shared_ptr<const Observation> obs;  // of the visibilities accumulated (null: none came)
  Array<double> cells;  // [y][x], geom.cells(): W_k, the summed weight of the visibilities in cell k
  Array<double> totals;  // [sum of the weights inside the grid, sum over cells of W_k^2]
  template <class F> void each_array(F&& f) { f(cells); f(totals); }
};

}  // namespace uvflow
