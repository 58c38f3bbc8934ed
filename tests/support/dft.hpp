// The direct-DFT dirty image: the reference every image test compares against.
#pragma once

#include <memory>
#include <vector>

#include "runtime/payloads/vis.hpp"

namespace uvflow::test {

// I(x, y) = sum_i w_i Re[V_i exp(-2 pi i (u_i l + v_i m + w_i (n - 1)))] / sum_i w_i, in double
// precision, with l = (N/2 - x) cell_rad, m = (y - N/2) cell_rad, n = sqrt(1 - l^2 - m^2)
// (N = image_size; x, y 0-based): RA increases to the left, as in the SIN images of DESIGN.md.
// Row-major [y][x]. The blocks must be on the host; their coords are ignored.
std::vector<double> dft_dirty_image(const std::vector<std::shared_ptr<const VisBlock>>& blocks, int image_size,
                                    double cell_rad);

}  // namespace uvflow::test
