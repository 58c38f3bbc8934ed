// The "exponential of semicircle" (ES) gridding kernel of w-stacking (grid.wstack, degrid.wstack):
//   psi(x) = exp(beta (sqrt(1 - (2x/W)^2) - 1)) for |x| <= W/2 cells, 0 outside,
// its Fourier transform psi^(t) = integral psi(x) exp(-2 pi i x t) dx (real and even; by
// Gauss-Legendre quadrature), and the choice of W and beta from the requested accuracy and the
// oversampling factor sigma (grid cells per image pixel).
//
// Why it works (Poisson summation, derived here, used on all three axes): for any real g and any
// t with |t| <= 1/(2 sigma),
//   sum over integers b of psi(g - b) exp(-2 pi i b t) = exp(-2 pi i g t) psi^(t) + sum_{j != 0} psi^(t + j) (...)
// so exp(-2 pi i g t) = sum_b psi(g - b) exp(-2 pi i b t) / psi^(t) up to the aliases psi^(t + j),
// j != 0, which the kernel makes small. On u and v, b is a grid cell and t = X / grid_size for
// the pixel X cells from the centre (the FFT does the sum over b); on w, b is a w-plane and t is
// dw (n - 1 - t0), the w-screen's phase rate (the per-plane screens do the sum).
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "runtime/host_device.hpp"

namespace uvflow::es {

struct Kernel {
  int support = 0;     // W: cells (or planes) touched per axis
  double beta = 0;     // shape
  double sigma = 0;    // the oversampling the kernel was chosen for: |t| <= 1/(2 sigma)
  double error = 0;    // its per-axis RMS error at the worst t (axis_error)
};

// psi at x cells from the kernel centre (0 outside |x| <= W/2).
UVFLOW_HD inline double psi(double x, int support, double beta) {
  const double r = 2 * x / support;
  const double q = 1 - r * r;
  return q > 0 ? exp(beta * (sqrt(q) - 1)) : 0.0;
}

// psi^(t), by Gauss-Legendre quadrature over [0, W/2] (psi is even).
double ft(const Kernel& k, double t);

// The per-axis error the kernel leaves at frequency t: the RMS over the sub-cell position g in
// [0, 1) of |sum_b psi(g - b) exp(-2 pi i b t) / psi^(t) - exp(-2 pi i g t)|, the W taps of the
// gridder and nothing else; axis_error is its maximum over |t| <= 1/(2 sigma). Evaluated directly
// (not from the alias series), so it measures exactly what the gridder does.
double tap_error(int support, double beta, double t);
double axis_error(int support, double beta, double sigma);

// The narrowest kernel whose three axes together (sqrt(3) axis_error, errors of independent axes
// adding in quadrature) stay below `epsilon` for oversampling `sigma`, beta the best for that
// support (searched on a grid of beta / W) among those whose image-domain correction does not
// amplify single-precision rounding above epsilon / 2 at the image's corner: (psi^(0) /
// psi^(1/(2 sigma)))^2 x 6e-8. Without that bound, padding 1.25 at epsilon 1e-5 (W 10) gave a
// relative error of 1.1e-4 against a DFT; small paddings need larger epsilon. The image's relative L2 error measured against a DFT is
// 0.5 to 0.9 times sqrt(3) axis_error (tests/wstack_test.cpp prints both). Throws std::invalid_argument when no support up to
// kMaxSupport reaches it (the message names the epsilon and the padding, the parameter that helps).
// Each (epsilon, sigma) is searched once per process (thread-safe); later calls return its answer.
inline constexpr int kMaxSupport = 16;
Kernel choose(double epsilon, double sigma);

// The W taps psi(W/2 - f - i), i = 0 .. W-1, of a visibility whose first cell is f cells beyond
// its kernel's left edge (f in [0, 1)), as W polynomials in f of degree W + 3 (Chebyshev
// interpolation, stored as monomials in 2f - 1 and evaluated in double): a few vectorised
// multiply-adds instead of W exponentials. Its error is part of what the DFT tests measure.
// The tap polynomials' evaluation (host and device): c[d * kMaxSupport + i], d = 0 .. degree.
UVFLOW_HD inline void eval_taps(const double* c, int degree, int support, double f, double* out) {
  const double t = 2 * f - 1;
  for (int i = 0; i < support; ++i) out[i] = c[degree * kMaxSupport + i];
  for (int d = degree - 1; d >= 0; --d)
    for (int i = 0; i < support; ++i) out[i] = out[i] * t + c[d * kMaxSupport + i];
}

class Taps {
 public:
  Taps() = default;
  explicit Taps(const Kernel& k);
  int support() const { return w_; }
  int degree() const { return deg_; }
  const std::vector<double>& coefficients() const { return c_; }  // [degree][tap], taps padded to kMaxSupport
  void eval(double f, double* out) const { eval_taps(c_.data(), deg_, w_, f, out); }

 private:
  int w_ = 0, deg_ = 0;
  std::vector<double> c_;
};

// 1 / psi^(t) for |t| <= 1/(2 sigma), tabulated (cubic interpolation, relative error below 1e-9)
// so that the image-domain correction of every pixel costs a few flops.
class Correction {
 public:
  Correction() = default;
  explicit Correction(const Kernel& k);
  // The table of `k`, made once per process (4096 quadratures: about 5 ms on the VM).
  static std::shared_ptr<const Correction> of(const Kernel& k);
  double operator()(double t) const { return interp(inv_.data(), int(inv_.size()), step_, t); }
  double step() const { return step_; }
  const std::vector<double>& samples() const { return inv_; }  // 1 / psi^(i step), i = -1 .. n + 2
  // Cubic Lagrange through the four samples around |t| (host and device).
  UVFLOW_HD static double interp(const double* inv, int n, double step, double t) {
    const double p = fabs(t) / step;
    const int i = p < n - 3 ? int(p) : n - 3;
    const double f = p - i;
    const double* y = inv + i;  // y[0] is sample i - 1
    return -f * (f - 1) * (f - 2) / 6 * y[0] + (f + 1) * (f - 1) * (f - 2) / 2 * y[1] -
           (f + 1) * f * (f - 2) / 2 * y[2] + (f + 1) * f * (f - 1) / 6 * y[3];
  }

 private:
  double step_ = 0;
  std::vector<double> inv_;
};

// Smallest even 2^a 3^b 5^c that is at least `min_size` (FFT-friendly grid sizes).
int good_size(double min_size);

}  // namespace uvflow::es
