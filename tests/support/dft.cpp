#include "tests/support/dft.hpp"

#include <tbb/parallel_for.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace uvflow::test {

std::vector<double> dft_dirty_image(const std::vector<std::shared_ptr<const VisBlock>>& blocks, int image_size,
                                    double cell_rad) {
  // Structure of arrays in double, so the pixel loop reads each visibility once per pixel.
  std::vector<double> u, v, w, re, im, weight;
  double weight_sum = 0;
  for (auto& b : blocks) {
    for (std::size_t i = 0; i < b->size(); ++i) {
      u.push_back(b->uu[i]);
      v.push_back(b->vv[i]);
      w.push_back(b->ww[i]);
      re.push_back(b->vis[i].real());
      im.push_back(b->vis[i].imag());
      weight.push_back(b->weight[i]);
      weight_sum += b->weight[i];
    }
  }
  if (weight_sum == 0) throw std::invalid_argument("dft_dirty_image: no weighted visibilities");
  const int half = image_size / 2;
  std::vector<double> image(std::size_t(image_size) * image_size);
  tbb::parallel_for(0, image_size, [&](int y) {
    const double m = (y - half) * cell_rad;
    for (int x = 0; x < image_size; ++x) {
      const double l = (half - x) * cell_rad;
      const double n_minus_1 = std::sqrt(1 - l * l - m * m) - 1;
      double sum = 0;
      for (std::size_t i = 0; i < u.size(); ++i) {
        const double phase = 2 * std::numbers::pi * (u[i] * l + v[i] * m + w[i] * n_minus_1);
        // Re[V exp(-i phase)]
        sum += weight[i] * (re[i] * std::cos(phase) + im[i] * std::sin(phase));
      }
      image[std::size_t(y) * image_size + x] = sum / weight_sum;
    }
  });
  return image;
}

}  // namespace uvflow::test
