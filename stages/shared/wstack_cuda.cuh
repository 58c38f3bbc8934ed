// The device side of w-stacking (stages/grid/wstack.cu, stages/degrid/wstack.cu): the same
// kernel taps, planes, screens and image-domain factors as stages/shared/wstack.cpp, which is the
// reference these backends are tested against (tests/gpu_wstack_test.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "runtime/buffer.hpp"
#include "stages/shared/es_kernel.hpp"
#include "stages/shared/wstack.hpp"

namespace uvflow::wstack::cuda {

// Everything a device kernel needs, by value; the tables live in device arrays the stage keeps.
struct DevicePlan {
  int n = 0, ng = 0, support = 0, degree = 0;
  double beta = 0, cell = 0, scale = 0;  // scale = ng * cell
  double w0 = 0, dw = 0, t0 = 0;
  int planes = 0;
  const double* taps = nullptr;  // es::Taps coefficients
  const double* corr = nullptr;  // es::Correction samples
  int corr_n = 0;
  double corr_step = 0;
};

// Uploads the engine's tables (on `s`) and fills the plan; `keep` holds the device copies.
inline DevicePlan make_plan(const Engine& e, const Planes& pl, const device::Stream& s, Array<double>& taps_dev,
                            Array<double>& corr_dev) {
  const es::Taps taps(e.kernel());
  const auto& c = taps.coefficients();
  const auto& corr = e.correction().samples();
  taps_dev = Array<double>::device(c.size(), s);
  device::copy(taps_dev.data(), c.data(), c.size() * sizeof(double), device::Copy::host_to_device, s);
  corr_dev = Array<double>::device(corr.size(), s);
  device::copy(corr_dev.data(), corr.data(), corr.size() * sizeof(double), device::Copy::host_to_device, s);
  // The host vectors are copied from pageable memory: the copy has completed when it returns.
  DevicePlan p;
  p.n = e.options().image_size;
  p.ng = e.grid_size();
  p.support = e.kernel().support;
  p.degree = taps.degree();
  p.beta = e.kernel().beta;
  p.cell = e.options().cell_rad;
  p.scale = p.ng * p.cell;
  p.w0 = pl.w0, p.dw = pl.dw, p.t0 = pl.t0, p.planes = pl.count;
  p.taps = taps_dev.data();
  p.corr = corr_dev.data();
  p.corr_n = int(corr.size());
  p.corr_step = e.correction().step();
  return p;
}

__device__ inline int wrap(int a, int n) {
  a %= n;
  return a < 0 ? a + n : a;
}

// The first cell of one axis and its W taps at grid position g.
__device__ inline int axis_taps(const DevicePlan& p, double g, double* k) {
  const double left = g - p.support / 2.0;
  const int first = int(ceil(left));
  es::eval_taps(p.taps, p.degree, p.support, first - left, k);
  return first;
}

// The w-kernel weight of plane `plane` for |w| (0 when the visibility does not touch it).
__device__ inline double plane_weight(const DevicePlan& p, double abs_w, int plane) {
  const double s = (abs_w - p.w0) / p.dw;
  int p0 = int(ceil(s - p.support / 2.0));
  p0 = p0 < 0 ? 0 : (p0 > p.planes - p.support ? p.planes - p.support : p0);
  if (plane < p0 || plane >= p0 + p.support) return 0;
  return es::psi(s - plane, p.support, p.beta);
}

// n - 1 - t0 at pixel offsets (X, Y), as Engine::n_minus_1.
__device__ inline double screen_rate(const DevicePlan& p, int X, int Y) {
  const double l = X * p.cell, m = Y * p.cell, r2 = l * l + m * m;
  return -r2 / (1 + sqrt(1 - r2)) - p.t0;
}

// The product of the three image-domain factors at pixel (x, y).
__device__ inline double correction(const DevicePlan& p, int x, int y) {
  const int X = p.n / 2 - x, Y = y - p.n / 2;
  return es::Correction::interp(p.corr, p.corr_n, p.corr_step, double(X) / p.ng) *
         es::Correction::interp(p.corr, p.corr_n, p.corr_step, double(Y) / p.ng) *
         es::Correction::interp(p.corr, p.corr_n, p.corr_step, p.dw * screen_rate(p, X, Y));
}

}  // namespace uvflow::wstack::cuda
