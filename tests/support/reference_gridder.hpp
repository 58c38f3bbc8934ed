// The independent reference for the gridding tests: Listing 1 of the NAG memo in double
// precision, written plainly from DESIGN.md's conventions and sharing no code with the stages
// (test inputs come from grid_cases.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/payloads/kernels.hpp"

namespace uvflow::test {

// Where one visibility lands: cell, plane, sub-cell offsets, conjugation, support; `inside` is
// false when its footprint leaves the grid.
struct RefPlacement {
  bool inside = false;
  int u = 0, v = 0, plane = 0, off_u = 0, off_v = 0, support = 0;
  bool conj = false;
};
RefPlacement ref_place(float uu, float vv, float ww, const KernelStack& ks);

struct RefGrid {
  std::vector<cdouble> cells;  // [v][u]
  double norm = 0;
  double updates = 0;  // sum of (2s+1)^2 over gridded visibilities
  std::int64_t gridded = 0, skipped = 0;
};
// Grids every visibility of `blocks` (their uu, vv, ww, vis, weight; their own skipped counts
// added), reading the kernels from ks.quarter.
RefGrid ref_grid(const KernelStack& ks, const std::vector<std::shared_ptr<const VisBlock>>& blocks);

}  // namespace uvflow::test
