// uvw.bounding_box: the grid cells a placed block touches (NAG memo section 3.3, step 1).
//
//   in   vis  VisBlock, stream, backend residency: placed by uvw.w_sort (coords hold cell, support)
//   out  box  BoundingBox, stream, backend residency: inclusive cell range of every footprint,
//             cell +- support, over the visibilities on the grid; empty ([1, 0, 1, 0]) for none
//   backends: cpu  a parallel reduction within a block
//             cuda a block reduction, then atomics into the device-resident box; only in a
//                  build with CUDA
//   no parameters.
#pragma once

#include <memory>

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec uvw_bounding_box_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_bounding_box_cuda();  // stages/uvw/bounding_box.cu
#endif

}  // namespace uvflow
