// The reference for the Chebyshev-evaluated kernels (grid.tiled variant chebyshev): a stack's fit
// evaluated in double, independently of stages/shared/chebyshev.hpp (the memo's forward recurrence
// T_k = 2 x T_{k-1} - T_{k-2}, section 4, rather than Clenshaw's), written into a copy of the stack
// as its quarter kernels, so that ref_grid (Listing 1) grids with the fitted kernel.
#pragma once

#include <cmath>
#include <complex>
#include <memory>

#include "runtime/harness.hpp"
#include "runtime/payloads/kernels.hpp"
#include "stages/grid/tiled.hpp"
#include "stages/tiles/bucket_sort.hpp"
#include "stages/tiles/count.hpp"
#include "stages/uvw/bounding_box.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/grid_cases.hpp"

namespace uvflow::test {

// The fit of plane p at sub-sample offsets (ix, iy): zero beyond the disc r <= cheb_radius[p].
inline cdouble chebyshev_reference(const KernelStack& ks, int p, int ix, int iy) {
  const double R = double(ks.cheb_radius[p]) * ks.oversample, n = double(ix) * ix + double(iy) * iy;
  if (n > R * R) return 0;
  const double x = ks.cheb_in_r ? 2 * std::sqrt(n) / R - 1 : 2 * n / (R * R) - 1;
  const cfloat* c = ks.cheb_coef.host_data() + std::size_t(p) * ks.cheb_terms;
  cdouble sum = cdouble(c[0]);
  double t_prev = 1, t = x;
  for (int k = 1; k < ks.cheb_terms; ++k) {
    sum += cdouble(c[k]) * t;
    const double next = 2 * x * t - t_prev;
    t_prev = t, t = next;
  }
  return sum;
}

// A copy of `ks` (fitted) whose quarter kernels are its fit.
inline std::shared_ptr<KernelStack> fitted_as_quarters(const KernelStack& ks) {
  auto out = std::make_shared<KernelStack>(ks);
  out->quarter = Array<cfloat>::host(ks.quarter.size());
  for (int p = 0; p < ks.planes; ++p) {
    const int S = ks.half_size(p);
    cfloat* q = out->quarter.host_data() + ks.quarter_start[p];
    for (int iy = 0; iy < S; ++iy)
      for (int ix = 0; ix < S; ++ix) q[std::int64_t(iy) * S + ix] = cfloat(chebyshev_reference(ks, p, ix, iy));
  }
  return out;
}

// grid.tiled on the cpu (variant "uvflow": the table, or "chebyshev") fed by the cpu chain
// uvw.w_sort -> uvw.bounding_box -> tiles.count -> tiles.bucket_sort, tiles of tile_u x tile_v.
inline GridRun run_tiled_cpu(const std::shared_ptr<const KernelStack>& ks,
                             const std::vector<std::shared_ptr<const VisBlock>>& blocks, const std::string& variant,
                             int tile_u = 32, int tile_v = 16, std::int64_t central_box = 1) {
  StageHarness sort(uvw_w_sort::spec(), "cpu"), box(uvw_bounding_box::spec(), "cpu"), bucket(tiles_bucket_sort::spec(), "cpu"),
      count(tiles_count::spec(), "cpu", {{"tile_u", std::int64_t(tile_u)}, {"tile_v", std::int64_t(tile_v)}}),
      grid(grid_tiled::spec(), "cpu", {{"variant", variant}, {"central_box", central_box}});
  sort.set_input("kernels", ks);
  grid.set_input("kernels", ks);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    sort.process({{"vis", blocks[i]}});
    auto placed = sort.output<VisBlock>("vis", i);
    box.process({{"vis", placed}});
    count.process({{"vis", placed}, {"box", box.outputs("box")[i]}});
    bucket.process({{"vis", placed}, {"counts", count.outputs("counts")[i]}});
    grid.process({{"buckets", bucket.outputs("buckets")[i]}});
  }
  grid.finish();
  return {grid.output<Grid>("grid"), grid.work()};
}

}  // namespace uvflow::test
