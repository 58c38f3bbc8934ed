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

  int half_size(int p) const { return kernel_half_size(oversample, support[p]); }
  template <class F> void each_array(F&& f) {
    f(support); f(quarter_start); f(quarter); f(rows_start); f(rows); f(footprint_sum);
    f(oerc_start); f(oerc); f(nag);
  }
};

}  // namespace uvflow
