// Making a KernelStack: from quarter kernels computed anywhere (a plugin's own w-kernels, kernels
// read from a file) with make_kernel_stack, or, for a producer that fills the stack's quarter and
// supports itself (kernels.wproj), with build_kernel_layouts. Either way the stack holds what every
// built-in consumer reads: quarter_start, footprint_sum and the layouts asked for (WPROJ.md).
#pragma once

#include <memory>
#include <vector>

#include "runtime/host_device.hpp"
#include "runtime/payloads/kernels.hpp"

namespace uvflow {

// Which of the derived layouts to build (quarter_start and footprint_sum always are).
struct KernelLayouts {
  bool rows = true;     // grid.tiled, cpu
  bool gpu = false;     // oerc and nag: grid.tiled, cuda
  bool pinned = false;  // allocate them in pinned memory (the stack will be uploaded)
};

// Kernels made elsewhere, one compacted quarter per w-plane, in kernels.wproj's convention: plane p
// has support s_p (a visibility touches (2 s_p + 1)^2 cells) and its quarter holds S_p x S_p values,
// S_p = kernel_half_size(oversample, s_p), quarter[p][iy * S_p + ix] = K_p at sub-sample offsets
// (iy, ix) from the kernel centre, o samples per grid cell. Plane k sits at |w| = k^2 / w_scale, and
// a kernel is conjugated for w > 0 by the gridders, not here.
struct QuarterKernels {
  GridGeometry geom;        // the image and grid the kernels are for
  int oversample = 4;       // even, >= 2
  double w_scale = 0;       // > 0 with several planes
  double max_w = 0;         // wavelengths (informational)
  int conv_size = 0;        // FFT size the kernels were made with (informational)
  std::vector<int> support;                  // per plane, >= 0
  std::vector<std::vector<cfloat>> quarter;  // per plane, S_p^2 values
  // Divide every plane by plane 0's sum of Re K_0 over its footprint at integer offsets, so that
  // plane 0 sums to 1 there, as kernels.wproj's planes do (the gridders' norm assumes it only
  // through the footprint sums, so unnormalised kernels still give a consistent image).
  bool normalise = true;
};

// The stack of `k` with the layouts asked for. Throws std::invalid_argument naming the plane and
// the sizes when the supports, quarters, geometry or oversample do not fit together.
std::shared_ptr<KernelStack> make_kernel_stack(const QuarterKernels& k, KernelLayouts layouts = {});

// Fills quarter_start from the supports, max_support, footprint_sum and the chosen layouts from
// `quarter`. Call after support, oversample, planes and quarter are set; throws std::logic_error
// when quarter does not hold what the supports need.
void build_kernel_layouts(KernelStack& ks, KernelLayouts which = {});

// Offsets of each plane's compacted quarter kernel for the given supports (S_p^2 values each).
Array<std::int64_t> quarter_offsets(const Array<std::int32_t>& support, int oversample, std::int64_t* total);

// NAG layout: the column within a plane's row (S values) holding K[iy][|off_u + k*o|], for a
// support s and oversampling o (000 memo 3.5: runs of 2s+1 for 0 < |off_u| < o/2, folded runs of
// s+1 for off_u = 0 and |off_u| = o/2, read with unit stride as k varies).
UVFLOW_HD inline int nag_column(int s, int o, int off_u, int k) {
  const int a = off_u < 0 ? -off_u : off_u;
  const int kk = off_u <= 0 ? k : -k;  // the run stores off_u = -a's order
  const int run = 2 * s + 1, folded = (o / 2 - 1) * run;
  if (a == 0) return folded + s - (kk < 0 ? -kk : kk);
  if (2 * a == o) return folded + s + 1 + s - (kk < 0 ? -kk : kk) + (kk >= 1);
  return (a - 1) * run + s + kk;
}

// Residue order (the uvflow walkers' table, locality::ResidueTable): a row of a plane's quarter (S
// values) with the columns ix of one residue c = ix mod o together, ascending; residue c starts at
// c q + min(c, r), q = S / o, r = S % o (the first r residues hold q + 1 values).
UVFLOW_HD inline int residue_start(int c, int o, int S) {
  const int q = S / o, r = S % o;
  return c * q + (c < r ? c : r);
}
UVFLOW_HD inline int residue_column(int ix, int o, int S) { return residue_start(ix % o, o, S) + ix / o; }

// A footprint row in residue order: footprint column j (0 .. 2s, k = j - s) of a visibility at
// sub-cell offset off_u (in [-o/2, o/2]) reads ix = |off_u + k o|, which grows by o per column
// from k = (off_u < 0) on and falls below, so it lies at up + j for j >= split and at down - j
// below: two unit-stride runs.
struct ResidueRun {
  int split, up, down;
};
UVFLOW_HD inline ResidueRun residue_run(int s, int o, int off_u) {
  const int S = kernel_half_size(o, s);
  const int cp = off_u >= 0 ? off_u : off_u + o, cm = off_u <= 0 ? -off_u : o - off_u;  // the two residues
  return {s + (off_u < 0), residue_start(cp, o, S) - (off_u < 0) - s, residue_start(cm, o, S) - (off_u > 0) + s};
}
UVFLOW_HD inline int residue_run_column(const ResidueRun& run, int j) { return j >= run.split ? run.up + j : run.down - j; }

// OERC layout: offset within a plane of the value K[|off_v + j*o|][|off_u + k*o|].
UVFLOW_HD inline long long oerc_offset(int s, int o, int off_u, int idx_v, int k) {
  const int a = off_u < 0 ? -off_u : off_u, S = kernel_half_size(o, s), L = 2 * s + 1;
  return (static_cast<long long>(a) * S + S - 1 - idx_v) * L + s + (off_u >= 0 ? k : -k);
}

}  // namespace uvflow
