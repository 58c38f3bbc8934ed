// uvw.bounding_box: the grid cells a placed block touches (NAG memo section 3.3, step 1).
//
//   in   vis  VisBlock, stream: placed by uvw.w_sort (coords hold cell and support)
//   out  box  BoundingBox, stream: inclusive cell range of every footprint, cell +- support;
//             empty for a block with no visibilities
//   backend: cpu (parallel within a block); no parameters.
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec uvw_bounding_box_spec();

}  // namespace uvflow
