#include "stages/grid/wstack.hpp"

#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/shared/sky_wcs.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::grid_wstack {

wstack::Engine make_engine(const Params& p) {
  if (p.image_size % 2) throw ParamError("image_size", "image_size must be even");
  const wstack::Options o{.image_size = int(p.image_size),
                          .cell_rad = p.cell_arcsec * kArcsecToRad,
                          .epsilon = p.epsilon,
                          .padding = p.padding,
                          .double_grid = p.accumulate == "double" || (p.accumulate == "auto" && p.epsilon <= 1e-5)};
  try {
    return wstack::Engine(o);
  } catch (const std::invalid_argument& e) {
    throw ParamError("epsilon", e.what());
  } catch (const InputError& e) {
    throw ParamError("cell_arcsec", e.what());
  }
}

namespace {

class WStackGridder : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { engine_.emplace(make_engine(p)); }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    check_arrays(*block);
    if (!obs_) obs_ = block->obs;
    const float *uu = block->uu.host_data(), *vv = block->vv.host_data(), *ww = block->ww.host_data();
    const float* weight = block->weight.host_data();
    const cfloat* v = block->vis.host_data();
    for (std::size_t i = 0; i < block->size(); ++i) {
      if (!std::isfinite(uu[i]) || !std::isfinite(vv[i]) || !std::isfinite(ww[i]))
        throw InputError("block " + std::to_string(block->index) + ", visibility " + std::to_string(i) +
                         ": uvw is not finite");
      if (weight[i] == 0) continue;  // contributes nothing
      u_.push_back(uu[i]), v_.push_back(vv[i]), w_.push_back(ww[i]);
      c_.push_back(v[i] * weight[i]);
      sum_weight_ += weight[i];
    }
  }

  void finish(Context& ctx) override {
    if (!obs_) throw std::runtime_error("grid.wstack: no visibility block arrived");
    if (!(sum_weight_ > 0)) throw std::runtime_error("grid.wstack: the weights sum to 0: no visibility was gridded");
    wstack::Stats st;
    const std::vector<double> acc = engine_->grid(u_.data(), v_.data(), w_.data(), c_.data(), c_.size(), &st);
    const int n = engine_->options().image_size;
    const es::Kernel& k = engine_->kernel();
    spdlog::info("grid.wstack '{}': {} visibilities, epsilon {:g}: ES kernel W {} (beta {:.2f} W), {} w-planes of {}^2 "
                 "cells; {:.2f} s sorting, {:.2f} s gridding, {:.2f} s FFTs, {:.2f} s screens", ctx.stage_id(), c_.size(),
                 engine_->options().epsilon, k.support, k.beta / k.support, st.planes, engine_->grid_size(), st.sort_s,
                 st.grid_s, st.fft_s, st.screen_s);
    auto img = std::make_shared<Image>();
    img->nx = img->ny = n;
    img->pixels = Array<float>::host(std::size_t(n) * n);
    for (std::size_t i = 0; i < acc.size(); ++i) img->pixels[i] = float(acc[i] / sum_weight_);
    img->wcs = sky_wcs(*obs_, engine_->options().cell_rad);
    ctx.add_work({.visibilities = double(c_.size()), .updates = st.updates});
    ctx.emit(image, img);
  }

 private:
  std::optional<wstack::Engine> engine_;
  std::shared_ptr<const Observation> obs_;
  std::vector<float> u_, v_, w_;
  std::vector<cfloat> c_;
  double sum_weight_ = 0;
};

}  // namespace

// The estimate (choose: auto): sorting, W^3 kernel-point updates per visibility, one pruned FFT of
// the padded grid and one w-screen pass over the image per plane. Rates measured on the VM (per
// core: 2.09 M visibilities at 2048^2 and the small preset at epsilon 1e-4; the stage's log splits
// them) and on the H100 (bench/results/h100_wstack.md, el56-82 at 8192^2: 67 ms of gridding, 85 ms
// of FFTs and transposes, 25 ms of image sums, 50 ms of waits and allocation).
Estimate estimate(const Params& p, const PortShapes& in, const EstimateContext& c) {
  const double n = estimated_visibilities(in, vis.name);
  const Observation& obs = *in.find(vis.name)->second.obs;
  const wstack::Engine engine = make_engine(p);
  const int planes = engine.planes(obs.min_abs_w, obs.max_abs_w).count;
  const double W = engine.kernel().support, cells = double(engine.grid_size()) * engine.grid_size();
  const double pixels = double(p.image_size) * p.image_size;
  const bool cuda = c.backend == "cuda";
  const double seconds = seconds_at(c, n, 1.3e7, 2e9) + seconds_at(c, n * W * W * W, 2e8, 1e11) +
                         seconds_at(c, planes * cells * std::log2(cells), 3.8e9, 3.9e12) +
                         seconds_at(c, planes * pixels, 3e8, 1.2e11) + (cuda ? 0.05 : 0);
  char basis[128];
  std::snprintf(basis, sizeof basis, "%.3g visibilities, W %d, %d planes of %d^2 cells", n, int(W), planes,
                engine.grid_size());
  return {.seconds = seconds, .error = p.epsilon, .basis = basis};
}

StageSpec spec() { return decl.spec({cpu_backend<WStackGridder>(), UVFLOW_CUDA_BACKEND(make_cuda)}, estimate); }

}  // namespace uvflow::grid_wstack
