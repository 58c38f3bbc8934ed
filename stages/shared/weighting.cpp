#include "stages/shared/weighting.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/error.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow {
namespace weighting {

int wsclean_padded_size(int image_size, double padding) {
  // The same double arithmetic as WSClean's Settings::RecalculateDerivedDimensions.
  const auto padded = static_cast<std::int64_t>(std::ceil(image_size * padding));
  return int(padded + (4 - padded % 4) % 4);
}

WeightGridGeometry weight_grid(const KernelStack& ks, double padding) {
  const int n = ks.geom.image_size;
  if (n < 2 || !(ks.geom.cell_rad > 0 && std::isfinite(ks.geom.cell_rad)))
    throw InputError("kernel stack geometry: image_size " + std::to_string(n) + ", cell " +
                     std::to_string(ks.geom.cell_rad) + " rad: no weighting grid can be made for it");
  return {wsclean_padded_size(n, padding), ks.geom.cell_rad};
}

std::shared_ptr<WeightDensity> zero_density(const WeightGridGeometry& g, bool pinned) {
  auto d = std::make_shared<WeightDensity>();
  d->geom = g;
  d->cells = Array<double>::host(std::size_t(g.cells()), pinned);
  double* c = d->cells.data();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, d->cells.size(), std::size_t(1) << 16),
                    [c](const tbb::blocked_range<std::size_t>& r) { std::fill(c + r.begin(), c + r.end(), 0.0); });
  d->totals = Array<double>::host(2, pinned);
  std::fill(d->totals.begin(), d->totals.end(), 0.0);
  return d;
}

void check_block(const VisBlock& vis, Location where) {
  check_arrays(vis);
  auto located = [&](const ArrayBase& a, const char* name) {
    // The planner moves inputs to the backend's side; anything else is a planning bug.
    if (!a.empty() && a.location() != where)
      throw std::logic_error("block " + std::to_string(vis.index) + ": " + name + " is in " + to_string(a.location()) +
                             " memory, the backend reads " + to_string(where) + " memory");
  };
  located(vis.uu, "uu");
  located(vis.vv, "vv");
  located(vis.weight, "weight");
}

double sum_of_squares(const WeightDensity& d) {
  const double* c = d.cells.data();
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, d.cells.size(), std::size_t(1) << 14), 0.0,
      [c](const tbb::blocked_range<std::size_t>& r, double s) {
        for (std::size_t k = r.begin(); k != r.end(); ++k) s += c[k] * c[k];
        return s;
      },
      [](double a, double b) { return a + b; });
}

void check_density(const WeightDensity& d, Location where) {
  if (d.geom.width < 2 || d.geom.width % 2 || !(d.geom.cell_rad > 0))
    throw InputError("weight density: grid width " + std::to_string(d.geom.width) + ", cell " +
                     std::to_string(d.geom.cell_rad) + " rad is not a weighting grid");
  if (std::int64_t(d.cells.size()) != d.geom.cells() || d.totals.size() != 2)
    throw InputError("weight density: " + std::to_string(d.cells.size()) + " cells and " +
                     std::to_string(d.totals.size()) + " totals for a grid of " + std::to_string(d.geom.cells()) +
                     " cells and 2 totals");
  if (d.cells.location() != where || d.totals.location() != where)
    throw std::logic_error(std::string("weight density is in ") + to_string(d.cells.location()) +
                           " memory, the backend reads " + to_string(where) + " memory");
}

void check_same_data(const VisBlock& vis, const WeightDensity& d) {
  if (!vis.obs || !d.obs) return;
  if (vis.obs->origin != d.obs->origin || vis.obs->total_visibilities != d.obs->total_visibilities)
    throw InputError("block " + std::to_string(vis.index) + " comes from " + vis.obs->origin + " (" +
                     std::to_string(vis.obs->total_visibilities) + " visibilities), the weight density from " +
                     d.obs->origin + " (" + std::to_string(d.obs->total_visibilities) +
                     "): uvw.weight_density and uvw.weighting must read the same visibilities");
}

}  // namespace weighting
}  // namespace uvflow
