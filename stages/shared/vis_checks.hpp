// Checks of a VisBlock that several stages make before reading it (both backends).
#pragma once

#include "runtime/payloads/vis.hpp"

namespace uvflow {

// Throw InputError naming the block: unless uu, vv, ww and weight have one value per visibility;
// unless the block went through uvw.w_sort (the stages downstream need its coords).
void check_arrays(const VisBlock& b);
void check_placed(const VisBlock& b);

}  // namespace uvflow
