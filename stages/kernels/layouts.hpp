// Derived kernel layouts, built from a KernelStack's compacted quarter kernels (WPROJ.md).
#pragma once

#include "runtime/payloads/kernels.hpp"

namespace uvflow {

// Fills quarter_start from the supports, then the `rows` layout and footprint_sum from `quarter`.
// Call after support, oversample, planes and quarter are set.
void build_kernel_layouts(KernelStack& ks);

// Offsets of each plane's compacted quarter kernel for the given supports (S_p^2 values each).
Array<std::int64_t> quarter_offsets(const Array<std::int32_t>& support, int oversample, std::int64_t* total);

}  // namespace uvflow
