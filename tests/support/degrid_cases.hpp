// Random inputs of the degridding tests (cpu and gpu): visibilities whose footprints stay on the
// grid, with both signs of w, and random model grids and images.
#pragma once

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "tests/support/repeats.hpp"

namespace uvflow::test {

// n visibilities with unit weights, uniform in the part of the uv plane whose footprints stay on
// the grid, |w| up to the stack's max_w with both signs.
inline std::shared_ptr<VisBlock> random_block(const KernelStack& ks, std::size_t n, std::mt19937_64& rng) {
  const double reach = 0.42 * ks.geom.grid_size / ks.geom.scale();
  std::uniform_real_distribution<double> uv(-reach, reach), w(-ks.max_w, ks.max_w), amp(-1, 1);
  auto b = std::make_shared<VisBlock>();
  b->uu = Array<float>::host(n);
  b->vv = Array<float>::host(n);
  b->ww = Array<float>::host(n);
  b->vis = Array<cfloat>::host(n);
  b->weight = Array<float>::host(n);
  for (std::size_t i = 0; i < n; ++i) {
    b->uu[i] = float(uv(rng));
    b->vv[i] = float(uv(rng));
    b->ww[i] = float(w(rng));
    b->vis[i] = cfloat(float(amp(rng)), float(amp(rng)));
    b->weight[i] = 1;
  }
  return b;
}

// random_block's `distinct` positions, each repeated 1 to max_repeats times at the same uvw with
// values of its own, in shuffled order (repeat_pattern).
inline std::shared_ptr<VisBlock> repeated_block(const KernelStack& ks, std::size_t distinct, int max_repeats,
                                                std::mt19937_64& rng) {
  const auto base = random_block(ks, distinct, rng);
  const std::vector<std::size_t> from = repeat_pattern(rng, distinct, max_repeats);
  auto b = random_block(ks, from.size(), rng);  // its values and weights; uvw from `base`
  for (std::size_t j = 0; j < from.size(); ++j) {
    b->uu[j] = base->uu[from[j]];
    b->vv[j] = base->vv[from[j]];
    b->ww[j] = base->ww[from[j]];
  }
  return b;
}

inline std::shared_ptr<Grid> random_grid(const KernelStack& ks, std::mt19937_64& rng) {
  auto g = std::make_shared<Grid>(Grid::zeros_on_host(ks.geom, nullptr));
  std::uniform_real_distribution<float> amp(-1, 1);
  for (cfloat& c : g->cells) c = cfloat(amp(rng), amp(rng));
  return g;
}

// An n x n model image of pixels uniform in [-1, 1].
inline std::shared_ptr<Image> random_image(int n, std::mt19937_64& rng) {
  auto img = std::make_shared<Image>();
  img->nx = img->ny = n;
  img->pixels = Array<float>::host(std::size_t(n) * n);
  std::uniform_real_distribution<float> amp(-1, 1);
  for (float& p : img->pixels) p = amp(rng);
  return img;
}

}  // namespace uvflow::test
