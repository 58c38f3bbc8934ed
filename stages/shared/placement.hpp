// Where a visibility lands on the grid (DESIGN.md "Conventions for gridding", fixed): the one
// implementation, called by the CPU stages and inside CUDA kernels alike.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/host_device.hpp"
#include "runtime/payloads/kernels.hpp"

namespace uvflow {

// What placing needs from a kernel stack, by value so a kernel can take it as an argument.
struct Placement {
  double scale = 0, w_scale = 0;
  int grid_size = 0, planes = 0, oversample = 0;
  // Checks what placement needs from the stack; throws InputError naming the field. Host only.
  static Placement of(const KernelStack& ks);
};

enum class Placed { inside, outside, invalid };  // invalid: non-finite uvw

// Fills `c` for a visibility inside the grid. `support` is the stack's per-plane support array
// (host or device memory, wherever the caller runs). Double precision, as Listing 1.
UVFLOW_HD inline Placed place(const Placement& p, const std::int32_t* support, float uu, float vv, float ww,
                              GridCoord& c) {
  const double pos_u = -double(uu) * p.scale, pos_v = double(vv) * p.scale;
  const double w_index = std::sqrt(std::fabs(double(ww) * p.w_scale));
  if (!(std::isfinite(pos_u) && std::isfinite(pos_v) && std::isfinite(w_index))) return Placed::invalid;
  // Far outside: decided here so that the int conversions below stay defined.
  if (std::fabs(pos_u) >= p.grid_size || std::fabs(pos_v) >= p.grid_size) return Placed::outside;
  const double round_u = std::round(pos_u), round_v = std::round(pos_v);
  const int grid_u = int(round_u) + p.grid_size / 2, grid_v = int(round_v) + p.grid_size / 2;
  const int plane = int(std::fmin(std::round(w_index), double(p.planes - 1)));
  const int s = support[plane];
  if (grid_u - s < 0 || grid_u + s >= p.grid_size || grid_v - s < 0 || grid_v + s >= p.grid_size)
    return Placed::outside;
  c.u = grid_u;
  c.v = grid_v;
  c.plane = std::int16_t(plane);
  c.off_u = std::int8_t(std::round((round_u - pos_u) * p.oversample));
  c.off_v = std::int8_t(std::round((round_v - pos_v) * p.oversample));
  c.conj = ww > 0;
  c.pad_ = 0;
  c.support = std::int16_t(s);
  return Placed::inside;
}

// Index into KernelStack::footprint_sum of a placed visibility.
UVFLOW_HD inline std::int64_t footprint_index(const GridCoord& c, int oversample) {
  const int o1 = oversample + 1, h = oversample / 2;
  return (std::int64_t(c.plane) * o1 + c.off_v + h) * o1 + c.off_u + h;
}

}  // namespace uvflow
