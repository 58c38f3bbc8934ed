// uvw.w_sort: places every visibility on the grid once (001 memo section 4.2) and stably sorts the
// block by w-plane, so the gridders and the tiling stages never recompute positions.
//
//   in   vis      VisBlock, stream: raw visibilities (uu, vv, ww in wavelengths)
//        kernels  KernelStack, once: grid geometry, oversample, w_scale, per-plane supports
//   out  vis      VisBlock, stream: `coords` filled (cell, plane, offsets, conj, support), the
//                 visibilities whose footprint leaves the grid removed and added to `skipped`,
//                 every array reordered by w-plane (stable: ties keep their input order)
//   backend: cpu (parallel within a block); no parameters.
//
// GridPlacer is the one implementation of the placement conventions of DESIGN.md; the gridders
// that take raw visibilities (grid.serial, grid.atomic) use it too.
#pragma once

#include <algorithm>
#include <cmath>

#include "runtime/payloads/kernels.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec uvw_w_sort_spec();

// Throw InputError naming the block: unless uu, vv, ww and weight have one value per visibility;
// unless the block went through uvw.w_sort (the stages downstream need its coords).
void check_arrays(const VisBlock& b);
void check_placed(const VisBlock& b);

// Where visibilities land on the grid of one kernel stack (DESIGN.md "Conventions for gridding").
class GridPlacer {
 public:
  enum class Result { inside, outside, invalid };  // invalid: non-finite uvw

  // Checks what placement needs from the stack (throws InputError naming the field) and keeps a
  // pointer to its supports: the stack must outlive the placer.
  explicit GridPlacer(const KernelStack& ks);

  Result place(float uu, float vv, float ww, GridCoord& c) const {
    const double pos_u = -double(uu) * scale_, pos_v = double(vv) * scale_;
    const double w_index = std::sqrt(std::fabs(double(ww) * w_scale_));
    if (!(std::isfinite(pos_u) && std::isfinite(pos_v) && std::isfinite(w_index))) return Result::invalid;
    // Far outside: decided here so that the int conversions below stay defined.
    if (std::fabs(pos_u) >= grid_size_ || std::fabs(pos_v) >= grid_size_) return Result::outside;
    const double round_u = std::round(pos_u), round_v = std::round(pos_v);
    const int grid_u = int(round_u) + centre_, grid_v = int(round_v) + centre_;
    const int plane = int(std::min(std::round(w_index), double(planes_ - 1)));
    const int s = support_[plane];
    if (grid_u - s < 0 || grid_u + s >= grid_size_ || grid_v - s < 0 || grid_v + s >= grid_size_)
      return Result::outside;
    c.u = grid_u;
    c.v = grid_v;
    c.plane = std::int16_t(plane);
    c.off_u = std::int8_t(std::round((round_u - pos_u) * oversample_));
    c.off_v = std::int8_t(std::round((round_v - pos_v) * oversample_));
    c.conj = ww > 0;
    c.pad_ = 0;
    c.support = std::int16_t(s);
    return Result::inside;
  }

 private:
  double scale_, w_scale_;
  int grid_size_, centre_, planes_, oversample_;
  const std::int32_t* support_;
};

}  // namespace uvflow
