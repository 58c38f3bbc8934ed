#include "stages/grid/moving_window.hpp"

#include <oneapi/tbb/parallel_sort.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.hpp"
#include "stages/grid/atomic.hpp"
#include "stages/shared/baseline_groups.hpp"
#include "stages/shared/placement.hpp"

namespace uvflow::grid_moving_window {
namespace {

// The reference for the approximation: groups by sorting (key, index) pairs (the order a stable
// sort by key gives, as on the device), each group's mean w summed in double in that order, then
// Listing 1's loop for each visibility at its own u, v with the group's w.
class MovingWindowCpu final : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override {
    if (const auto& g = pc.output(grid).grid; g && !pc.dry_run)
      grid_ = std::make_shared<Grid>(Grid::zeros_on_host(*g, nullptr, pc.pinned(grid.name)));
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto ks = ctx.in(kernels);
    grid_atomic::check_inputs(*block, *ks, Location::host);
    const Placement placement = Placement::of(*ks);
    const int last = ks->planes - 1;
    const std::int64_t last_size = ks->half_size(last);
    if (std::int64_t(ks->quarter.size()) < ks->quarter_start[last] + last_size * last_size)
      throw InputError("block " + std::to_string(block->index) + ": kernel stack quarter holds " +
                       std::to_string(ks->quarter.size()) + " values, fewer than its supports need");
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(ks->geom, nullptr));
    expect_geometry(*grid_, ks->geom, "grid.moving_window");
    if (!grid_->obs) grid_->obs = block->obs;

    const std::size_t n = block->size();
    std::vector<std::uint64_t> keys(n);
    time_block_keys(*block, params().time_block, keys.data(), "grid.moving_window");
    std::vector<std::pair<std::uint64_t, std::uint32_t>> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = {keys[i], std::uint32_t(i)};
    tbb::parallel_sort(order.begin(), order.end());

    const float *uu = block->uu.data(), *vv = block->vv.data(), *ww = block->ww.data(), *wt = block->weight.data();
    const cfloat* val = block->vis.data();
    const std::int32_t* support = ks->support.data();
    const double* fsum = ks->footprint_sum.data();
    float* cells = reinterpret_cast<float*>(grid_->cells.data());  // [v][u][re, im]
    const std::int64_t n_grid = ks->geom.grid_size;
    const int o = ks->oversample;
    double norm = 0, updates = 0;
    std::int64_t gridded = 0, skipped = block->skipped;
    for (std::size_t begin = 0, end; begin < n; begin = end) {
      double w_sum = 0;
      for (end = begin; end < n && order[end].first == order[begin].first; ++end) w_sum += ww[order[end].second];
      const float w = float(w_sum / double(end - begin));
      for (std::size_t e = begin; e < end; ++e) {
        const std::uint32_t i = order[e].second;
        GridCoord c;
        const Placed where = place(placement, support, uu[i], vv[i], w, c);
        if (where == Placed::invalid)
          throw InputError("block " + std::to_string(block->index) + ", visibility " + std::to_string(i) +
                           ": uvw (or its group's mean w) is not finite");
        if (where == Placed::outside) {
          ++skipped;
          continue;
        }
        const int s = c.support, S = ks->half_size(c.plane);
        const float vr = val[i].real() * wt[i], vi = val[i].imag() * wt[i];
        const float conj = c.conj ? -1.0f : 1.0f;
        const cfloat* kern = ks->quarter.data() + ks->quarter_start[c.plane];
        for (int j = -s; j <= s; ++j) {
          const cfloat* krow = kern + std::int64_t(std::abs(c.off_v + j * o)) * S;
          float* row = cells + 2 * ((c.v + j) * n_grid + c.u);
          for (int k = -s; k <= s; ++k) {
            const cfloat kv = krow[std::abs(c.off_u + k * o)];
            const float cr = kv.real(), ci = conj * kv.imag();
            row[2 * k] += vr * cr - vi * ci;
            row[2 * k + 1] += vi * cr + vr * ci;
          }
        }
        norm += double(wt[i]) * fsum[footprint_index(c, o)];
        ++gridded;
        updates += double(2 * s + 1) * (2 * s + 1);
      }
    }
    grid_->totals[0] += norm;
    grid_->totals[1] += double(gridded);
    grid_->totals[2] += double(skipped);
    ctx.add_work({.visibilities = double(n), .updates = updates});
  }

  void finish(Context& ctx) override {
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(ctx.in(kernels)->geom, nullptr));
    ctx.emit(grid, std::move(grid_));
  }

 private:
  std::shared_ptr<Grid> grid_;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<MovingWindowCpu>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::grid_moving_window
