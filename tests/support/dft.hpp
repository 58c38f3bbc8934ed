// Direct DFTs, the references the image tests compare against: the dirty image of visibilities, and
// the phases of the centred transforms that fft.grid_to_image and fft.image_to_grid stand for.
#pragma once

#include <complex>
#include <memory>
#include <numbers>
#include <vector>

#include "runtime/payloads/vis.hpp"

namespace uvflow::test {

// I(x, y) = sum_i w_i Re[V_i exp(-2 pi i (u_i l + v_i m + w_i (n - 1)))] / sum_i w_i, in double
// precision, with l = (N/2 - x) cell_rad, m = (y - N/2) cell_rad, n = sqrt(1 - l^2 - m^2)
// (N = image_size; x, y 0-based): RA increases to the left, as in the SIN images of DESIGN.md.
// Row-major [y][x]. The blocks must be on the host; their coords are ignored.
std::vector<double> dft_dirty_image(const std::vector<std::shared_ptr<const VisBlock>>& blocks, int image_size,
                                    double cell_rad);

// exp(sign 2 pi i j / N) for any integer j, from a table of N values: the phases of the centred
// DFTs that the image transforms stand for (fft.grid_to_image: sign -1; fft.image_to_grid: +1).
class Twiddles {
 public:
  Twiddles(int N, int sign) : e_(std::size_t(N)) {
    for (int j = 0; j < N; ++j) e_[std::size_t(j)] = std::polar(1.0, sign * 2 * std::numbers::pi * j / N);
  }
  std::complex<double> operator()(long j) const {
    const long N = long(e_.size());
    return e_[std::size_t(((j % N) + N) % N)];
  }

 private:
  std::vector<std::complex<double>> e_;
};

}  // namespace uvflow::test
