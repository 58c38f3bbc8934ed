// A least-squares fit of an elliptical 2-D Gaussian to a patch of an image: how a radio astronomer
// measures the flux of an unresolved source in a restored image (its peak, free of the pixel grid).
#pragma once

#include <vector>

namespace uvflow::test {

struct Gaussian2D {
  double amplitude = 0, x0 = 0, y0 = 0;  // peak value; centre in pixels
  double sigma_major = 0, sigma_minor = 0, angle = 0;  // pixels; radians from +x
  double rms_misfit = 0;                 // RMS of the residual of the fit over the patch
};

// Fits the (2 half + 1)^2 pixels around (x, y) of an [ny][nx] image (row-major), started from the
// pixel's value and a round `sigma_guess`. Throws if the patch leaves the image or the fit fails.
Gaussian2D fit_gaussian(const std::vector<float>& image, long nx, long ny, int x, int y, int half,
                        double sigma_guess);

}  // namespace uvflow::test
