// Chebyshev-evaluated w-kernels (SDP Memo 73, the seeds' 004, sections 3-5): each plane's kernel
// approximated by a 1-D Chebyshev series in r^2 (or r) over the disc r <= R_p, zero beyond, so a
// gridder can evaluate it at (plane, dx, dy) instead of reading the table. The evaluation is here,
// one implementation for the cpu and cuda gridders; the fit (kernels.wproj) is in chebyshev.cpp.
//
// Distances are in sub-samples (1/oversample of a cell): a grid point k cells along u and j along v
// from a visibility placed with sub-cell offsets (off_u, off_v) sits at (ix, iy) = (off_u + k o,
// off_v + j o), the sample the table gridders read. The disc's radius is R_p = s_p + 1/2 cells, so
// o R_p = o/2 + o s_p is the quarter kernel's last sample (an integer): the disc holds every sample
// of the table along the axes and drops only the corners of the square footprint.
#pragma once

#include <cmath>
#include <vector>

#include "runtime/host_device.hpp"
#include "runtime/payloads/kernels.hpp"

namespace uvflow {

// sum_k c[k] T_k(x) for complex coefficients c (re, im interleaved) and real x, by Clenshaw's
// recurrence (stable, 2 multiply-adds per term and component), in float.
UVFLOW_HD inline void chebyshev_clenshaw(const float* c, int n, float x, float& re, float& im) {
  float br1 = 0, bi1 = 0, br2 = 0, bi2 = 0;
  const float x2 = 2 * x;
  for (int k = n - 1; k >= 1; --k) {
    const float br = x2 * br1 - br2 + c[2 * k], bi = x2 * bi1 - bi2 + c[2 * k + 1];
    br2 = br1, bi2 = bi1, br1 = br, bi1 = bi;
  }
  re = x * br1 - br2 + c[0];
  im = x * bi1 - bi2 + c[1];
}

// A stack's fit as the gridders read it (its arrays, host or device, wherever the caller runs).
struct ChebyshevKernel {
  const float* coef = nullptr;    // planes x terms complex values, (re, im) interleaved
  const float* radius = nullptr;  // R_p in cells
  int terms = 0, oversample = 0;
  bool in_r = false;

  // What evaluating plane p needs: its coefficients, the disc (largest ix^2 + iy^2 inside it, in
  // sub-samples^2, exact in int) and the map of ix^2 + iy^2 (or its root) onto [-1, 1].
  struct Plane {
    const float* coef;
    int limit;
    float scale;
  };
  UVFLOW_HD Plane plane(int p) const {
    const float R = radius[p] * float(oversample);  // an integer for R_p = s + 1/2 (exact in float)
    const int r = int(R + 0.5f);
    return {coef + 2LL * p * terms, r * r, in_r ? 2.0f / R : 2.0f / (R * R)};
  }
  // x in [-1, 1] of a point at n = ix^2 + iy^2 inside the disc.
  UVFLOW_HD float arg(const Plane& q, int n) const { return (in_r ? sqrtf(float(n)) : float(n)) * q.scale - 1.0f; }
  // The kernel at offsets (ix, iy) sub-samples from the visibility: zero beyond the disc.
  UVFLOW_HD void value(const Plane& q, int ix, int iy, float& re, float& im) const {
    const int n = ix * ix + iy * iy;
    if (n > q.limit) {
      re = im = 0;
      return;
    }
    chebyshev_clenshaw(q.coef, terms, arg(q, n), re, im);
  }

  static ChebyshevKernel of(const KernelStack& ks) {
    return {reinterpret_cast<const float*>(ks.cheb_coef.data()), ks.cheb_radius.data(), ks.cheb_terms, ks.oversample,
            ks.cheb_in_r};
  }
};

// How well one plane's series matches its table, over every sample of the quarter kernel (the
// corners beyond the disc, where the series is 0, included), relative to the plane's peak |K|.
struct ChebyshevPlaneError {
  double rms = 0, max = 0;
  int terms = 0;  // the terms the plane's fit uses (the rest are 0): fewer than asked where more would be ill-conditioned
};

// Fits every plane of `ks` (quarter and supports set) with `terms` Chebyshev coefficients in r^2
// (or r, `in_r`) by least squares over all the samples of its quarter kernel inside the disc (with
// fewer terms on a plane where more would make the coefficients grow beyond 16 times its peak: the
// float series would lose to rounding what the fit gained), and
// fills cheb_terms, cheb_in_r, cheb_coef, cheb_radius and cheb_footprint_sum (host arrays, pinned
// when asked). Returns each plane's error, the series evaluated in float as the gridders do. Throws
// std::invalid_argument for terms < 1.
std::vector<ChebyshevPlaneError> fit_chebyshev(KernelStack& ks, int terms, bool in_r, bool pinned = false);

}  // namespace uvflow
