#include "tests/support/reference_gridder.hpp"

#include <cmath>

namespace uvflow::test {

RefPlacement ref_place(float uu, float vv, float ww, const KernelStack& ks) {
  const int n = ks.geom.grid_size;
  const double scale = n * ks.geom.cell_rad;
  const double pos_u = -double(uu) * scale, pos_v = double(vv) * scale;
  RefPlacement p;
  if (std::fabs(pos_u) > 2.0 * n || std::fabs(pos_v) > 2.0 * n) return p;  // far outside
  p.u = int(std::round(pos_u)) + n / 2;
  p.v = int(std::round(pos_v)) + n / 2;
  p.plane = int(std::round(std::sqrt(std::fabs(double(ww) * ks.w_scale))));
  if (p.plane > ks.planes - 1) p.plane = ks.planes - 1;
  p.support = ks.support[p.plane];
  p.off_u = int(std::round((std::round(pos_u) - pos_u) * ks.oversample));
  p.off_v = int(std::round((std::round(pos_v) - pos_v) * ks.oversample));
  p.conj = ww > 0;
  p.inside = p.u - p.support >= 0 && p.u + p.support < n && p.v - p.support >= 0 && p.v + p.support < n;
  return p;
}

RefGrid ref_grid(const KernelStack& ks, const std::vector<std::shared_ptr<const VisBlock>>& blocks) {
  const int n = ks.geom.grid_size, o = ks.oversample;
  RefGrid grid;
  grid.cells.assign(std::size_t(n) * n, 0.0);
  // Plane p's quarter kernel is S x S values, S = o/2 + o*s + 1, the planes one after the other.
  std::vector<std::size_t> plane_start(ks.planes, 0);
  for (int p = 1; p < ks.planes; ++p) {
    const std::size_t size = o / 2 + o * ks.support[p - 1] + 1;
    plane_start[p] = plane_start[p - 1] + size * size;
  }
  for (const auto& b : blocks) {
    grid.skipped += b->skipped;
    for (std::size_t i = 0; i < b->size(); ++i) {
      const RefPlacement p = ref_place(b->uu[i], b->vv[i], b->ww[i], ks);
      if (!p.inside) {
        ++grid.skipped;
        continue;
      }
      const int s = p.support, size = o / 2 + o * s + 1;
      const cdouble value = cdouble(b->vis[i]) * double(b->weight[i]);
      double sum = 0;
      for (int j = -s; j <= s; ++j)
        for (int k = -s; k <= s; ++k) {
          const int iy = std::abs(p.off_v + j * o), ix = std::abs(p.off_u + k * o);
          cdouble c = cdouble(ks.quarter[plane_start[p.plane] + std::size_t(iy) * size + ix]);
          if (p.conj) c = std::conj(c);
          grid.cells[std::size_t(p.v + j) * n + p.u + k] += value * c;
          sum += c.real();
        }
      grid.norm += sum * b->weight[i];
      grid.updates += double(2 * s + 1) * (2 * s + 1);
      ++grid.gridded;
    }
  }
  return grid;
}

}  // namespace uvflow::test
