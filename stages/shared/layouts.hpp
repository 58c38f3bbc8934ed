// Derived kernel layouts, built from a KernelStack's compacted quarter kernels (WPROJ.md).
#pragma once

#include <cstdlib>

#include "runtime/host_device.hpp"
#include "runtime/payloads/kernels.hpp"

namespace uvflow {

// Which of the derived layouts to build (quarter_start and footprint_sum always are).
struct KernelLayouts {
  bool rows = true;     // grid.tiled, cpu
  bool gpu = false;     // oerc and nag: grid.tiled, cuda
  bool pinned = false;  // allocate them in pinned memory (the stack will be uploaded)
};

// Fills quarter_start from the supports, footprint_sum and the chosen layouts from `quarter`.
// Call after support, oversample, planes and quarter are set.
void build_kernel_layouts(KernelStack& ks, KernelLayouts which = {});

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

// OERC layout: offset within a plane of the value K[|off_v + j*o|][|off_u + k*o|].
UVFLOW_HD inline long long oerc_offset(int s, int o, int off_u, int idx_v, int k) {
  const int a = off_u < 0 ? -off_u : off_u, S = kernel_half_size(o, s), L = 2 * s + 1;
  return (static_cast<long long>(a) * S + S - 1 - idx_v) * L + s + (off_u >= 0 ? k : -k);
}

// Offsets of each plane's compacted quarter kernel for the given supports (S_p^2 values each).
Array<std::int64_t> quarter_offsets(const Array<std::int32_t>& support, int oversample, std::int64_t* total);

}  // namespace uvflow
