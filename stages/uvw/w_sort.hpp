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
// Placement (stages/uvw/placement.hpp) is the one implementation of the conventions of DESIGN.md;
// the gridders that take raw visibilities (grid.serial, grid.atomic) use it too.
#pragma once

#include "runtime/payloads/kernels.hpp"
#include "stages/uvw/placement.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec uvw_w_sort_spec();

// Throw InputError naming the block: unless uu, vv, ww and weight have one value per visibility;
// unless the block went through uvw.w_sort (the stages downstream need its coords).
void check_arrays(const VisBlock& b);
void check_placed(const VisBlock& b);

}  // namespace uvflow
