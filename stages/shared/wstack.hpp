// W-stacking with ES kernels: the whole "visibilities <-> image" of grid.wstack and degrid.wstack
// on the CPU (and the plan and image-domain factors their cuda backends use too).
//
// The dirty image (tests/support/dft.hpp's definition, unnormalised)
//   I(x, y) = sum_k Re[c_k exp(-2 pi i (u_k l + v_k m + w_k (n - 1)))],  c_k = weight_k V_k,
// l = X cell, m = Y cell, X = N/2 - x, Y = y - N/2, is computed as
//   I = Re[ sum_p S_p(X, Y) FFT(G_p)[Y mod Ng][X mod Ng] ] / (psi^(X/Ng) psi^(Y/Ng) psi^(dw t')),
// where t' = n - 1 - t0 (t0 = -max|n-1|/2 centres the w-screen's phase rate on the field), the
// planes are w_p = w0 + p dw, S_p = exp(-2 pi i w_p t') is plane p's w-screen, and G_p is the
// grid onto which each visibility adds c_k exp(-2 pi i w_k t0) psi(s_k - p) psi(gu_k - b) psi(gv_k - a)
// (gu = u Ng cell, gv = v Ng cell, s = (w - w0)/dw) at the W x W cells a, b nearest to it. Every
// factor follows from es_kernel.hpp's Poisson identity on one axis: dw = 1 / (sigma max|n-1|)
// keeps dw |t'| <= 1/(2 sigma) as the grid's size Ng >= sigma N does for X/Ng and Y/Ng.
// Visibilities with w < 0 are gridded as (-u, -v, -w, conj c), which leaves Re[...] unchanged, so
// the planes span [min|w|, max|w|] only. The degridder is the exact adjoint (each step transposed,
// in reverse order); for a flipped visibility it returns the conjugate.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/buffer.hpp"
#include "runtime/stage.hpp"
#include "stages/shared/es_kernel.hpp"

namespace uvflow::wstack {

struct Options {
  int image_size = 0;      // N, even
  double cell_rad = 0;
  double epsilon = 1e-4;   // requested relative accuracy of the image
  double padding = 2.0;    // sigma: grid cells per image pixel (at least)
  bool double_grid = false;  // accumulate the uv grid in double (each plane is transformed in single)
};

struct Planes {
  double w0 = 0, dw = 0, t0 = 0;
  int count = 0;
};

// Where the time went and how much was done (for the stage report).
struct Stats {
  int planes = 0;
  double updates = 0;       // kernel-point updates: visibilities x W^3
  // fft_s includes planning and, for the degridder, the screens applied to the columns as the
  // transform takes them; screen_s the rest of the screens' work.
  double sort_s = 0, grid_s = 0, fft_s = 0, screen_s = 0;
};

class Engine;

// The cost model of grid.wstack (its estimate for `choose: auto`, and `padding: 0`): seconds to
// sort n visibilities, spread each over W^3 kernel points, transform every plane's grid (pruned)
// and apply its w-screen to the image, at rates measured on the VM per core and on the H100
// (bench/results/h100_wstack.md), for |w| in [min_abs_w, max_abs_w]; in `passes` passes (grid.wstack's
// pass_visibilities), each paying the planes' transforms and screens over the whole range (the
// worst case: a pass of part of the stream spans what that part's |w| spans).
double predicted_seconds(const Engine& e, double n, double min_abs_w, double max_abs_w, const EstimateContext& c,
                         double passes = 1);
// The options with the padding (of 1.25, 1.5, 1.75, 2, 2.5, 3) that reaches o.epsilon at the least
// predicted cost for that data; throws std::invalid_argument when none reaches it.
Options cheapest_padding(Options o, double n, double min_abs_w, double max_abs_w, const EstimateContext& c,
                         double passes = 1);
// Searches the kernels of those paddings for o.epsilon (kept for the process, es::choose): what
// cheapest_padding costs before the data is known, so that a stage can do it while data streams in.
void prepare_paddings(const Options& o);

class Engine {
 public:
  // Throws InputError when an image corner is at or beyond the horizon (l^2 + m^2 >= 1), and
  // std::invalid_argument when the kernel cannot reach epsilon.
  explicit Engine(const Options& o);

  const Options& options() const { return opt_; }
  const es::Kernel& kernel() const { return kernel_; }
  const es::Correction& correction() const { return *corr_; }
  int grid_size() const { return ng_; }
  double max_n_minus_1() const { return max_n1_; }
  Planes planes(double min_abs_w, double max_abs_w) const;

  // The unnormalised dirty image above, [y][x], in double.
  std::vector<double> grid(const float* u, const float* v, const float* w, const cfloat* c, std::size_t n,
                           Stats* stats = nullptr) const;
  // Its adjoint: model visibilities V_k = sum_{x,y} I(x, y) exp(+2 pi i (u_k l + v_k m + w_k (n - 1))).
  void degrid(const float* image, const float* u, const float* v, const float* w, std::size_t n, cfloat* out,
              Stats* stats = nullptr) const;

  // Image-domain factors: 1 / psi^ along u (or v) for pixel offset X (-N/2 < X <= N/2), and n - 1
  // for pixel offsets (X, Y).
  double corr_uv(int X) const { return (*corr_)(double(X) / ng_); }
  double corr_w(double dw, double t) const { return (*corr_)(dw * t); }
  double n_minus_1(int X, int Y) const;

 private:
  Options opt_;
  es::Kernel kernel_;
  std::shared_ptr<const es::Correction> corr_;  // shared by the engines of one kernel
  int ng_ = 0;
  double max_n1_ = 0;
};

}  // namespace uvflow::wstack
