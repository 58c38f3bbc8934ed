#include "stages/shared/chebyshev.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace uvflow {
namespace {

// The largest sum of |coefficients| kept, relative to the plane's peak |K|: float evaluation then
// errs by at most about 2 terms eps_float kMaxGrowth (1e-4 of the peak at 50 terms), typically far
// less; well-conditioned fits of these kernels stay near 1.
constexpr double kMaxGrowth = 16;

}  // namespace

std::vector<ChebyshevPlaneError> fit_chebyshev(KernelStack& ks, int terms, bool in_r, bool pinned) {
  if (terms < 1) throw std::invalid_argument("fit_chebyshev: " + std::to_string(terms) + " terms");
  const int planes = ks.planes, o = ks.oversample;
  ks.cheb_terms = terms;
  ks.cheb_in_r = in_r;
  ks.cheb_coef = Array<cfloat>::host(std::size_t(planes) * terms, pinned);
  ks.cheb_radius = Array<float>::host(std::size_t(planes), pinned);
  ks.cheb_footprint_sum = Array<double>::host(std::size_t(planes) * (o + 1) * (o + 1), pinned);
  for (int p = 0; p < planes; ++p) ks.cheb_radius[p] = float(ks.support[p]) + 0.5f;
  const ChebyshevKernel cheb = ChebyshevKernel::of(ks);
  std::vector<ChebyshevPlaneError> errors(static_cast<std::size_t>(planes));
  tbb::parallel_for(0, planes, [&](int p) {
    const int s = ks.support[p], S = ks.half_size(p);
    const cfloat* q = ks.quarter.data() + ks.quarter_start[p];
    const ChebyshevKernel::Plane plane = cheb.plane(p);
    const int limit = plane.limit;
    // Samples at one n = ix^2 + iy^2 share their basis row: least squares over all of them is
    // least squares over the distinct n, each at the samples' mean with weight their count.
    std::vector<int> count(std::size_t(limit) + 1, 0);
    std::vector<cdouble> sum(std::size_t(limit) + 1, 0);
    double peak = 0;
    for (int iy = 0; iy < S; ++iy)
      for (int ix = 0; ix < S; ++ix) {
        const cfloat k = q[std::int64_t(iy) * S + ix];
        peak = std::max(peak, double(std::abs(k)));
        const int n = ix * ix + iy * iy;
        if (n <= limit) ++count[n], sum[n] += cdouble(k);
      }
    std::vector<int> rows;
    for (int n = 0; n <= limit; ++n)
      if (count[n]) rows.push_back(n);
    Eigen::MatrixXd A(rows.size(), terms), B(rows.size(), 2);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const int n = rows[i];
      const double w = std::sqrt(double(count[n]));
      const double x = (in_r ? std::sqrt(double(n)) : double(n)) * double(plane.scale) - 1.0;
      double t_prev = 1, t = x;  // T_{k-1}(x), T_k(x)
      A(i, 0) = w;
      for (int k = 1; k < terms; ++k) {
        A(i, k) = w * t;
        const double next = 2 * x * t - t_prev;
        t_prev = t, t = next;
      }
      B(i, 0) = sum[n].real() / w;
      B(i, 1) = sum[n].imag() / w;
    }
    // One QR gives the least-squares fit with every leading number of terms t (R's leading t x t
    // block and the first t entries of Q^T B). The most terms whose coefficients stay within
    // kMaxGrowth times the peak are kept: beyond, the distinct radii are too few or too unevenly
    // spread for that degree (small planes, in r most), the coefficients grow large and cancel,
    // and the float series the gridders evaluate loses what the fit gained. The rest are 0.
    const Eigen::HouseholderQR<Eigen::MatrixXd> qr(A);
    const Eigen::MatrixXd qtb = qr.householderQ().adjoint() * B;
    Eigen::MatrixXd X;
    int used = std::min<int>(terms, int(rows.size()));
    for (; used > 1; --used) {
      X = qr.matrixQR().topLeftCorner(used, used).triangularView<Eigen::Upper>().solve(qtb.topRows(used));
      const double growth = X.rowwise().norm().sum();
      if (std::isfinite(growth) && growth <= kMaxGrowth * peak) break;
    }
    if (used == 1) X = qr.matrixQR().topLeftCorner(1, 1).triangularView<Eigen::Upper>().solve(qtb.topRows(1));
    cfloat* c = ks.cheb_coef.data() + std::size_t(p) * terms;
    for (int k = 0; k < terms; ++k) c[k] = k < used ? cfloat(float(X(k, 0)), float(X(k, 1))) : cfloat(0);

    // The series as the gridders evaluate it, at every n inside the disc.
    std::vector<cfloat> fitted(std::size_t(limit) + 1, 0);
    for (int n : rows) {
      float re, im;
      chebyshev_clenshaw(plane.coef, terms, cheb.arg(plane, n), re, im);
      fitted[n] = cfloat(re, im);
    }
    auto at = [&](int ix, int iy) {
      const int n = ix * ix + iy * iy;
      return n <= limit ? fitted[n] : cfloat(0);
    };
    double sq = 0, worst = 0;
    for (int iy = 0; iy < S; ++iy)
      for (int ix = 0; ix < S; ++ix) {
        const double e = std::abs(cdouble(at(ix, iy)) - cdouble(q[std::int64_t(iy) * S + ix]));
        sq += e * e;
        worst = std::max(worst, e);
      }
    const double scale = peak > 0 ? 1 / peak : 0;
    errors[std::size_t(p)] = {std::sqrt(sq / (double(S) * S)) * scale, worst * scale, used};
    for (int ov = -o / 2; ov <= o / 2; ++ov)
      for (int ou = -o / 2; ou <= o / 2; ++ou) {
        double fsum = 0;
        for (int j = -s; j <= s; ++j)
          for (int k = -s; k <= s; ++k) fsum += at(std::abs(ou + k * o), std::abs(ov + j * o)).real();
        ks.cheb_footprint_sum[(std::size_t(p) * (o + 1) + ov + o / 2) * (o + 1) + ou + o / 2] = fsum;
      }
  });
  return errors;
}

}  // namespace uvflow
