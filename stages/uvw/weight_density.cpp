#include "stages/uvw/weight_density.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "runtime/error.hpp"
#include "stages/shared/weighting.hpp"

namespace uvflow::uvw_weight_density {
namespace {

class WeightDensityCpu final : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned(density.name); }

  void process(Context& ctx) override {
    auto vis = ctx.in(uvw_weight_density::vis);
    weighting::check_block(*vis, Location::host);
    if (!density_) {
      density_ = weighting::zero_density(weighting::weight_grid(*ctx.in(kernels), params().padding), pinned_);
      density_->obs = vis->obs;
    }
    const WeightGridGeometry g = density_->geom;
    const float *uu = vis->uu.data(), *vv = vis->vv.data(), *wt = vis->weight.data();
    double* cells = density_->cells.data();
    const double sum = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, vis->size(), 4096), 0.0,
        [&](const tbb::blocked_range<std::size_t>& r, double sum) {
          for (std::size_t i = r.begin(); i != r.end(); ++i) {
            const double u = uu[i], v = vv[i], w = wt[i];
            if (!(std::isfinite(u) && std::isfinite(v)))
              throw InputError("block " + std::to_string(vis->index) + ", visibility " + std::to_string(i) +
                               ": uv is not finite");
            if (!(w >= 0 && std::isfinite(w)))
              throw InputError("block " + std::to_string(vis->index) + ", visibility " + std::to_string(i) +
                               ": weight " + std::to_string(w) + " is negative or not finite");
            const std::int64_t k = weight_cell(g, u, v);
            if (k < 0) continue;
            std::atomic_ref<double>(cells[k]).fetch_add(w, std::memory_order_relaxed);
            sum += w;
          }
          return sum;
        },
        [](double a, double b) { return a + b; });
    density_->totals[0] += sum;
    ctx.add_work({.visibilities = double(vis->size())});
  }

  void finish(Context& ctx) override {
    if (!density_) density_ = weighting::zero_density(weighting::weight_grid(*ctx.in(kernels), params().padding), pinned_);
    density_->totals[1] = weighting::sum_of_squares(*density_);
    ctx.emit(density, std::move(density_));
  }

 private:
  bool pinned_ = false;
  std::shared_ptr<WeightDensity> density_;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WeightDensityCpu>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::uvw_weight_density
