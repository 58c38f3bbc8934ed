// Reading a w-kernel at a visibility's exact sub-cell position (bilinear in the oversampled
// quarter table) instead of at the rounded one the table was sampled for: the rounded offset moves
// a visibility by up to 1/(2 oversample) cell, a phase error that grows towards the field edge
// (bench/results/degrid_accuracy.md). Shared by the gridder and degridders that offer
// kernel_lookup: linear, so that each pair stays adjoint.
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>

#include "runtime/buffer.hpp"
#include "stages/shared/placement.hpp"

namespace uvflow::kernel_lookup {

// Offsets in table samples, in [-o/2, o/2]: what GridCoord's off_u, off_v round.
struct Offsets {
  double u, v;
};
inline Offsets exact(const Placement& p, float uu, float vv) {
  const double pos_u = -double(uu) * p.scale, pos_v = double(vv) * p.scale;
  return {(std::round(pos_u) - pos_u) * p.oversample, (std::round(pos_v) - pos_v) * p.oversample};
}

// K at fractional table position (y, x) of a quarter kernel of side `size`, bilinear between the
// four samples around it; positions past the last sample take the last one. Integer positions give
// the sample itself.
inline std::complex<double> bilinear(const cfloat* k, int size, double y, double x) {
  const int y0 = std::min(int(y), size - 1), x0 = std::min(int(x), size - 1);
  const int y1 = std::min(y0 + 1, size - 1), x1 = std::min(x0 + 1, size - 1);
  const double ty = y - y0, tx = x - x0;
  auto at = [&](int r, int c) { return std::complex<double>(k[r * size + c]); };
  return (1 - ty) * ((1 - tx) * at(y0, x0) + tx * at(y0, x1)) + ty * ((1 - tx) * at(y1, x0) + tx * at(y1, x1));
}

}  // namespace uvflow::kernel_lookup
