// Schwab's rational approximation of the prolate spheroidal wave function (alpha = 1, m = 6), the
// `grdsf` that casacore and OSKAR use, the grid correction it implies for w-projection with an
// oversampled kernel table (WPROJ.md), and the exact response of the table itself. Shared by
// kernels.wproj (the kernel taper) and image.grid_correct; callable from CUDA device code too.
#pragma once

#include <cmath>

#include "runtime/host_device.hpp"

namespace uvflow {

// grdsf(nu) for nu in [0, 1]; 0 outside. Two rational pieces in d = nu^2 - end^2, joined at 0.75.
UVFLOW_HD inline double grdsf(double nu) {
  constexpr double p[2][5] = {{0.08203343, -0.3644705, 0.627866, -0.5335581, 0.2312756},
                              {0.004028559, -0.03697768, 0.1021332, -0.1201436, 0.06412774}};
  constexpr double q[2][3] = {{1.0, 0.8212018, 0.2078043}, {1.0, 0.9599102, 0.2918724}};
  int row;
  double end;
  if (nu >= 0.0 && nu < 0.75) {
    row = 0;
    end = 0.75;
  } else if (nu >= 0.75 && nu <= 1.0) {
    row = 1;
    end = 1.0;
  } else {
    return 0.0;
  }
  const double d = nu * nu - end * end;
  const double top = p[row][0] + d * (p[row][1] + d * (p[row][2] + d * (p[row][3] + d * p[row][4])));
  const double bottom = q[row][0] + d * (q[row][1] + d * q[row][2]);
  return top / bottom;
}

// Grid correction at grid index i of a grid_size grid gridded with an oversampled kernel table:
// 1 / (grdsf(|nu|) sinc(x)^p), nu = (i - N/2) / (N/2), x = pi (i - N/2) / (N o); 1 where the
// product vanishes (the grid edge). Looking up the nearest of o samples per cell moves each
// visibility by up to half a sample, which attenuates pixel x by the mean of exp(2 pi i d x / N)
// over d in [-1/2o, 1/2o]: sinc(x), so p = 1 undoes it. WPROJ.md and OSKAR divide by sinc^2
// (p = 2); against a direct DFT that over-corrects by one sinc (bench/image_accuracy: worst peak
// error 1.24 % with p = 2, 0.27 % with p = 1, at o = 4 and 0.7 of the half field).
UVFLOW_HD inline double grid_correction(int i, int grid_size, int oversample, int sinc_power = 1) {
  const int half = grid_size / 2;
  const double nu = double(i - half) / double(half);
  const double x = M_PI * double(i - half) / (double(grid_size) * oversample);
  const double sinc = i == half ? 1.0 : std::sin(x) / x;
  const double v = grdsf(std::fabs(nu)) * (sinc_power == 2 ? sinc * sinc : sinc);
  return v != 0.0 ? 1.0 / v : 1.0;
}

// The kernel table's own response at grid index i, per axis, relative to the centre's: averaged
// over a visibility's sub-cell position f (uniform over the cell), the image of it gridded with
// plane 0 is proportional to r(i_x) r(i_y); the grid's norm already holds the kernel's sum at each
// sub-cell offset, so the centre stays 1. For f in bin j = round(f o) in [-o/2, o/2] (the end bins
// are half as wide), the gridder adds K[|k o - j|] to cell k, |k| <= s, which pixel x = i - N/2
// sees with phase 2 pi (k - f) x / N. grdsf is only what the table approximates: the table holds
// the taper as conv_size/o screen samples across the grid, truncated at the support, and at
// oversample 16 on a 320-cell grid that moves a source 110 pixels out by 0.245 % (the case of
// pipelines/ms_dirty_image.yaml); this is exact for the table. `row0` is plane 0's quarter row 0,
// K_0[0][m] for m in [0, half_size), as interleaved (re, im); plane 0 is separable (K_0[iy][ix] =
// K_0[iy][0] K_0[0][ix] / K_0[0][0]), so one row gives both axes.
UVFLOW_HD inline double kernel_table_response(int i, int grid_size, int oversample, int half_size,
                                                       const float* row0) {
  const int o = oversample, s = (half_size - 1 - o / 2) / o;
  auto response = [&](int x) {
    const double t = 2 * M_PI * x / grid_size;
    double re = 0;
    for (int j = -o / 2; j <= o / 2; ++j) {
      // The integral of exp(-i t f) over the bin, f in [a, b].
      const double a = j == -o / 2 ? -0.5 : (j - 0.5) / o, b = j == o / 2 ? 0.5 : (j + 0.5) / o;
      const double bin_re = x == 0 ? b - a : (std::sin(t * b) - std::sin(t * a)) / t;
      const double bin_im = x == 0 ? 0.0 : (std::cos(t * b) - std::cos(t * a)) / t;
      double sum_re = 0, sum_im = 0;  // sum over k of K[|k o - j|] exp(i t k)
      for (int k = -s; k <= s; ++k) {
        const int m = k * o - j < 0 ? j - k * o : k * o - j;
        const double c = std::cos(t * k), sn = std::sin(t * k);
        sum_re += row0[2 * m] * c - row0[2 * m + 1] * sn;
        sum_im += row0[2 * m] * sn + row0[2 * m + 1] * c;
      }
      re += sum_re * bin_re - sum_im * bin_im;
    }
    return re;
  };
  return response(i - grid_size / 2) / response(0);
}

}  // namespace uvflow
