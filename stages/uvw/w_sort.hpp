// uvw.w_sort: places every visibility on the grid once (001 memo section 4.2) and stably sorts the
// block by w-plane, so the gridders and the tiling stages never recompute positions.
//
//   in   vis      VisBlock, stream, backend residency: raw visibilities (uu, vv, ww in wavelengths)
//        kernels  KernelStack, once, backend residency: grid geometry, oversample, w_scale, supports
//   out  vis      VisBlock, stream, backend residency: `coords` filled (cell, plane, offsets, conj,
//                 support), every array reordered by w-plane (stable: ties keep their input order),
//                 the visibilities whose footprint leaves the grid removed and added to `skipped`
//                 (cpu) or kept at the end with coords.plane = -1 (cuda)
//   backends: cpu  counting sort, parallel within a block
//             cuda CUB radix sort on the device; only in a build with CUDA
//   no parameters.
//
// Placement (stages/uvw/placement.hpp) is the one implementation of the conventions of DESIGN.md;
// the gridders that take raw visibilities (grid.serial, grid.atomic) use it too.
#pragma once

#include <memory>
#include <string>

#include "runtime/payloads/kernels.hpp"
#include "stages/uvw/placement.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec uvw_w_sort_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_w_sort_cuda();  // stages/uvw/w_sort.cu
#endif

// Throw InputError naming the block: unless uu, vv, ww and weight have one value per visibility;
// unless the block went through uvw.w_sort (the stages downstream need its coords).
void check_arrays(const VisBlock& b);
void check_placed(const VisBlock& b);

}  // namespace uvflow
