// Inputs for the weighting tests (uvw.weight_density, uvw.weighting): a kernel stack that carries
// only an image geometry, and visibility blocks whose uv exercise WSClean's weighting grid
// (crowded cells, v < 0 folded onto v > 0, v = 0, points beyond the grid, zero weights).
#pragma once

#include <cmath>
#include <memory>
#include <numbers>
#include <random>
#include <vector>

#include "runtime/payloads/kernels.hpp"

namespace uvflow::test {

// The weighting stages read only the geometry of the kernel stack.
inline std::shared_ptr<KernelStack> geometry_only_kernels(int image_size, double cell_arcsec) {
  auto ks = std::make_shared<KernelStack>();
  ks->geom.image_size = image_size;
  ks->geom.grid_size = image_size * 5 / 4;
  ks->geom.cell_rad = cell_arcsec / 3600 * std::numbers::pi / 180;
  return ks;
}

struct UvWeight {
  double u, v;  // wavelengths
  float weight = 1;
};

inline std::shared_ptr<VisBlock> uv_block(const std::vector<UvWeight>& pts, std::int64_t index = 0) {
  auto b = std::make_shared<VisBlock>();
  b->index = index;
  const std::size_t n = pts.size();
  b->uu = Array<float>::host(n);
  b->vv = Array<float>::host(n);
  b->ww = Array<float>::host(n);
  b->vis = Array<cfloat>::host(n);
  b->weight = Array<float>::host(n);
  for (std::size_t i = 0; i < n; ++i) {
    b->uu[i] = float(pts[i].u);
    b->vv[i] = float(pts[i].v);
    b->ww[i] = float(0.1 * pts[i].u);
    b->vis[i] = cfloat(1, 0);
    b->weight[i] = pts[i].weight;
  }
  return b;
}

// n visibilities for an image of `cell_rad` pixels: most in a dense core (many per weighting
// cell), some spread to the uv edge, 5 % beyond it, some on v = 0, both signs of v, 10 % with
// weight 0 and the rest in (0, 4].
inline std::vector<UvWeight> random_uv(std::mt19937_64& rng, std::size_t n, double cell_rad) {
  const double edge = 0.5 / cell_rad;  // |u| where the uv plane of the image ends
  std::normal_distribution<double> core(0.0, 0.05 * edge);
  std::uniform_real_distribution<double> wide(-edge, edge), beyond(edge, 1.5 * edge), weight(0.0, 4.0);
  std::uniform_real_distribution<double> pick(0.0, 1.0);
  std::vector<UvWeight> pts(n);
  for (auto& p : pts) {
    const double r = pick(rng);
    if (r < 0.6) p = {core(rng), core(rng)};
    else if (r < 0.9) p = {wide(rng), wide(rng)};
    else if (r < 0.95) p = {wide(rng), 0.0};
    else p = {beyond(rng) * (pick(rng) < 0.5 ? -1 : 1), wide(rng)};
    p.weight = pick(rng) < 0.1 ? 0.0f : float(4.0 - weight(rng));
  }
  return pts;
}

}  // namespace uvflow::test
