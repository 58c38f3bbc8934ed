// Inputs for gridder tests: random kernel stacks, and visibility blocks that exercise the
// placement rules (random positions in and beyond the grid, footprints on and just past every
// edge, both signs of w, thousands of visibilities in one cell), plus a runner and a metric.
#pragma once

#include <cmath>
#include <complex>
#include <cstdint>
#include <map>
#include <memory>
#include <numbers>
#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/harness.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/kernel_stack_builder.hpp"
#include "tests/support/repeats.hpp"

namespace uvflow::test {

// A kernel stack with random supports in [0, max_support] (plane 0 at least 1) and random quarter
// kernels whose real parts are positive and dominant, as in real w-kernels, so that float sums
// over thousands of visibilities do not cancel. Geometry: grid_size cells of 10 arcsec, planes
// spread over |w| <= max_w.
inline std::shared_ptr<KernelStack> random_kernel_stack(std::mt19937_64& rng, int planes, int max_support,
                                                        int oversample, int grid_size, double max_w = 2000) {
  auto ks = std::make_shared<KernelStack>();
  ks->geom.grid_size = grid_size;
  ks->geom.image_size = grid_size * 5 / 6;
  ks->geom.cell_rad = 10.0 / 3600 * std::numbers::pi / 180;
  ks->oversample = oversample;
  ks->planes = planes;
  ks->max_w = max_w;
  ks->w_scale = double(planes - 1) * (planes - 1) / max_w;
  ks->support = Array<std::int32_t>::host(planes);
  std::uniform_int_distribution<int> support(0, max_support);
  for (int p = 0; p < planes; ++p) ks->support[p] = p == 0 ? std::max(1, support(rng)) : support(rng);
  std::int64_t total = 0;
  quarter_offsets(ks->support, oversample, &total);
  ks->quarter = Array<cfloat>::host(std::size_t(total));
  std::uniform_real_distribution<float> re(0.2f, 1.0f), im(-0.5f, 0.5f);
  for (auto& c : ks->quarter) c = cfloat(re(rng), im(rng));
  ks->conv_size = 2 * (oversample / 2 + oversample * max_support + 1);
  build_kernel_layouts(*ks);
  return ks;
}

// One visibility, placed in grid cells: pos_u = -uu*scale, pos_v = vv*scale (DESIGN.md).
struct VisAt {
  double pos_u, pos_v, ww;
  cfloat vis = 1;
  float weight = 1;
};

inline std::shared_ptr<VisBlock> make_block(const KernelStack& ks, const std::vector<VisAt>& v,
                                            std::int64_t index = 0) {
  auto b = std::make_shared<VisBlock>();
  b->index = index;
  const std::size_t n = v.size();
  b->uu = Array<float>::host(n);
  b->vv = Array<float>::host(n);
  b->ww = Array<float>::host(n);
  b->vis = Array<cfloat>::host(n);
  b->weight = Array<float>::host(n);
  const double scale = ks.geom.scale();
  for (std::size_t i = 0; i < n; ++i) {
    b->uu[i] = float(-v[i].pos_u / scale);
    b->vv[i] = float(v[i].pos_v / scale);
    b->ww[i] = float(v[i].ww);
    b->vis[i] = v[i].vis;
    b->weight[i] = v[i].weight;
  }
  return b;
}

// |w| of plane p's centre, with the given sign.
inline double plane_w(const KernelStack& ks, int p, double sign) {
  return ks.w_scale > 0 ? sign * double(p) * p / ks.w_scale : 0.0;
}

// A random visibility value: real part dominant (a bright source), random weight.
inline void random_value(std::mt19937_64& rng, VisAt& v) {
  std::uniform_real_distribution<float> u(-1, 1), w(0.5f, 2.0f);
  v.vis = cfloat(1.5f + u(rng), 0.5f * u(rng));
  v.weight = w(rng);
}

// n visibilities uniform over 110% of the grid (some footprints leave it) and over 120% of the
// w range (some beyond the last plane, which they use), both signs of w.
inline std::vector<VisAt> random_vis(std::mt19937_64& rng, const KernelStack& ks, std::size_t n) {
  const double half = 0.55 * ks.geom.grid_size;
  std::uniform_real_distribution<double> pos(-half, half), w(-1.2 * ks.max_w, 1.2 * ks.max_w);
  std::vector<VisAt> v(n);
  for (auto& x : v) {
    x = {pos(rng), pos(rng), w(rng)};
    random_value(rng, x);
  }
  return v;
}

// For every plane, sign of w and edge of the grid: a visibility whose footprint ends exactly on
// the edge (gridded) and one whose footprint passes it by one cell (skipped). Sub-cell fractions
// stay within +-0.45 so that rounding cannot move a visibility across the edge. `outside` counts
// the ones that must be skipped.
inline std::vector<VisAt> edge_vis(std::mt19937_64& rng, const KernelStack& ks, std::int64_t* outside) {
  const int n = ks.geom.grid_size, centre = n / 2;
  std::uniform_real_distribution<double> frac(-0.45, 0.45);
  std::vector<VisAt> v;
  *outside = 0;
  for (int p = 0; p < ks.planes; ++p)
    for (double sign : {-1.0, 1.0}) {
      const int s = ks.support[p];
      // Cells (relative to the centre) of the footprint centre: on the low and high edges, then
      // one cell past them.
      for (int past = 0; past <= 1; ++past)
        for (int cell : {s - past - centre, n - 1 - s + past - centre})
          for (int axis = 0; axis < 2; ++axis) {
            VisAt x{frac(rng), frac(rng), plane_w(ks, p, sign)};
            (axis ? x.pos_v : x.pos_u) += cell;
            random_value(rng, x);
            v.push_back(x);
            *outside += past;
          }
    }
  return v;
}

// n visibilities in the cell (u, v) relative to the centre, at random sub-cell offsets and w.
inline std::vector<VisAt> hot_cell_vis(std::mt19937_64& rng, const KernelStack& ks, std::size_t n, int u, int v) {
  std::uniform_real_distribution<double> frac(-0.5, 0.5), w(-ks.max_w, ks.max_w);
  std::vector<VisAt> out(n);
  for (auto& x : out) {
    x = {u + frac(rng), v + frac(rng), w(rng)};
    random_value(rng, x);
  }
  return out;
}

// `distinct` random visibilities (random_vis) each repeated 1 to max_repeats times at the same uvw
// with values of its own, shuffled (repeat_pattern).
inline std::vector<VisAt> repeated_vis(std::mt19937_64& rng, const KernelStack& ks, std::size_t distinct,
                                       int max_repeats) {
  const std::vector<VisAt> base = random_vis(rng, ks, distinct);
  std::vector<VisAt> out;
  for (std::size_t i : repeat_pattern(rng, base.size(), max_repeats)) {
    VisAt x = base[i];
    random_value(rng, x);
    out.push_back(x);
  }
  return out;
}

// Runs a gridder stage through the harness on these blocks (already at its backend's side).
struct GridRun {
  std::shared_ptr<const Grid> grid;
  Work work;
};
inline GridRun run_gridder(const StageSpec& spec, const std::string& backend, std::shared_ptr<const KernelStack> ks,
                           const std::vector<std::shared_ptr<const VisBlock>>& blocks,
                           std::map<std::string, ParamValue> params = {}) {
  StageHarness h(spec, backend, std::move(params));
  h.set_input("kernels", std::move(ks));
  for (auto& b : blocks) h.process({{"vis", b}});
  h.finish();
  return {h.output<Grid>("grid"), h.work()};
}

// ||a - b|| / ||b|| over all cells; a is a host grid, b any complex sequence of the same size.
template <class Cells>
double relative_frobenius(const Grid& a, const Cells& b) {
  if (a.cells.size() != std::size(b)) throw std::logic_error("relative_frobenius: grids of different sizes");
  double diff = 0, ref = 0;
  std::size_t i = 0;
  for (const auto& x : b) {
    const std::complex<double> r(x), d = std::complex<double>(a.cells[i++]) - r;
    diff += std::norm(d);
    ref += std::norm(r);
  }
  return std::sqrt(diff / ref);
}

}  // namespace uvflow::test
