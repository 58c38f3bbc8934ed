// The w-projection kernel stack (WPROJ.md): per-plane supports, the compacted quarter kernels,
// and the reordered layouts the gridders read with unit stride.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/host_device.hpp"
#include "runtime/payloads/grid.hpp"

namespace uvflow {

inline constexpr char kKernelStack[] = "KernelStack";

// Side S of a plane's compacted quarter kernel: sub-sample offsets [0, o/2 + o s] of a support s.
UVFLOW_HD constexpr int kernel_half_size(int oversample, int support) { return oversample / 2 + oversample * support + 1; }
struct KernelStack : PayloadOf<KernelStack, kKernelStack> {
  GridGeometry geom;
  int oversample = 4;
  int conv_size = 0;       // FFT size the kernels were made with
  int planes = 0;
  double w_scale = 0;      // plane k sits at |w| = k^2 / w_scale
  double max_w = 0;        // wavelengths, as used for the plane count
  int max_support = 0;     // largest support: a host value even when the arrays are on a device
  int truncated_planes = 0;  // planes whose kernel is wider than the stack's cap on the support

  // support[p]: half-width in grid cells; a visibility touches (2s+1)^2 cells.
  Array<std::int32_t> support;
  // Quarter kernel of plane p, normalised, compacted to size S = o/2 + o*s + 1 a side:
  // quarter[quarter_start[p] + iy*S + ix] = K_p[iy][ix].
  Array<std::int64_t> quarter_start;
  Array<cfloat> quarter;
  // "rows" layout for unit-stride reads along u (the CPU tiled gridder): for plane p, sub-cell
  // offset off_u in [-o/2, o/2] and quarter row iy in [0, S), a run of 2s+1 values
  // K_p[iy][|off_u + k*o|] for k = -s..s, at rows_start[p] + ((off_u + o/2)*S + iy)*(2s+1).
  Array<std::int64_t> rows_start;
  Array<cfloat> rows;
  // Sum over a footprint of Re C, per (plane, off_v, off_u): a visibility's norm contribution is
  // its weight times footprint_sum[(p*(o+1) + off_v + o/2)*(o+1) + off_u + o/2].
  Array<double> footprint_sum;
  // The layouts of the GPU tiled gridders (WPROJ.md), built when kernels.wproj's `layouts` asks:
  // "oerc" (001 memo 4.1): per plane o/2+1 blocks of S runs of L = 2s+1 values; run for (a =
  // |off_u|, idx_v) at oerc_start[p] + (a*S + S-1-idx_v)*L, element s + sgn(off_u)*k holding
  // K_p[idx_v][|off_u + k*o|]. "nag" (000 memo 3.5): per plane S x S like quarter (same starts),
  // each row reordered so a warp reads consecutive values along u (nag_column(), kernel_stack_builder.hpp).
  Array<std::int64_t> oerc_start;
  Array<cfloat> oerc;
  Array<cfloat> nag;
  // Chebyshev fit of each plane (SDP Memo 73; kernels.wproj `chebyshev`, stages/shared/chebyshev.hpp),
  // read by grid.tiled's chebyshev variant: K_p at distance r cells from the visibility is
  // sum_k cheb_coef[p*cheb_terms + k] T_k(x), x = 2 r^2/R_p^2 - 1 (or 2 r/R_p - 1 with cheb_in_r),
  // and 0 beyond R_p = cheb_radius[p] = s_p + 1/2. cheb_terms 0: no fit (the arrays are empty).
  // cheb_footprint_sum is footprint_sum's counterpart for the fitted kernel (same indexing), so the
  // norm matches what the chebyshev gridder adds.
  int cheb_terms = 0;
  bool cheb_in_r = false;
  Array<cfloat> cheb_coef;
  Array<float> cheb_radius;
  Array<double> cheb_footprint_sum;

  int half_size(int p) const { return kernel_half_size(oversample, support[p]); }
  template <class F> void each_array(F&& f) {
    f(support); f(quarter_start); f(quarter); f(rows_start); f(rows); f(footprint_sum);
    f(oerc_start); f(oerc); f(nag); f(cheb_coef); f(cheb_radius); f(cheb_footprint_sum);
  }
};

}  // namespace uvflow
