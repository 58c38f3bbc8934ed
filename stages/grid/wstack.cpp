#include "stages/grid/wstack.hpp"

#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include <oneapi/tbb/task_arena.h>
#include <spdlog/spdlog.h>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/shared/sky_wcs.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::grid_wstack {

wstack::Engine make_engine(const Params& p) {
  if (p.image_size % 2) throw ParamError("image_size", "image_size must be even");
  if (p.padding != 0 && p.padding < 1.2) throw ParamError("padding", "must be 0 (chosen by cost) or at least 1.2");
  // Padding 0 is chosen when the data is known (padded_for_data); until then the engine of the
  // largest padding tried checks that epsilon can be reached at all.
  const wstack::Options o{.image_size = int(p.image_size),
                          .cell_rad = p.cell_arcsec * kArcsecToRad,
                          .epsilon = p.epsilon,
                          .padding = p.padding == 0 ? 3.0 : p.padding,
                          .double_grid = p.accumulate == "double" || (p.accumulate == "auto" && p.epsilon <= 1e-5)};
  try {
    return wstack::Engine(o);
  } catch (const std::invalid_argument& e) {
    throw ParamError("epsilon", e.what());
  } catch (const InputError& e) {
    throw ParamError("cell_arcsec", e.what());
  }
}

wstack::Engine padded_for_data(const wstack::Engine& e, const Params& p, double n, double min_abs_w,
                               double max_abs_w, const EstimateContext& c, std::string_view id) {
  if (p.padding != 0) return e;
  const double passes = passes_for(p, n);
  wstack::Engine chosen(wstack::cheapest_padding(e.options(), n, min_abs_w, max_abs_w, c, passes));
  spdlog::info("grid.wstack '{}': padding {:g} (W {}, {} planes of {}^2 cells) predicted fastest for {:.3g} "
               "visibilities in {:g} pass(es), |w| {:.3g}..{:.3g}", id, chosen.options().padding, chosen.kernel().support,
               chosen.planes(min_abs_w, max_abs_w).count, chosen.grid_size(), n, passes, min_abs_w, max_abs_w);
  return chosen;
}

double passes_for(const Params& p, double n) { return std::max(1.0, std::ceil(n / double(p.pass_visibilities))); }

wstack::Engine first_pass_engine(const wstack::Engine& e, const Params& p, const Observation* obs, bool whole, double n,
                                 double min_abs_w, double max_abs_w, const EstimateContext& c, std::string_view id) {
  if (!whole && obs && obs->total_visibilities > 0 && obs->max_abs_w > 0)
    return padded_for_data(e, p, double(obs->total_visibilities), obs->min_abs_w, obs->max_abs_w, c, id);
  return padded_for_data(e, p, n, min_abs_w, max_abs_w, c, id);
}

struct PaddingSearch::Task {
  tbb::task_group group;
  bool running = false;
};
PaddingSearch::PaddingSearch() : task_(std::make_unique<Task>()) {}
PaddingSearch::~PaddingSearch() {
  try {
    wait();
  } catch (...) {  // its error, if any, is the engine's own and was reported by check()
  }
}
void PaddingSearch::start(const Params& p, const wstack::Engine& e) {
  if (p.padding != 0 || task_->running) return;
  task_->running = true;
  task_->group.run([o = e.options()] { wstack::prepare_paddings(o); });
}
void PaddingSearch::wait() {
  if (!task_->running) return;
  task_->running = false;
  task_->group.wait();
}

namespace {

class WStackGridder : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { engine_.emplace(make_engine(p)); }
  void prepare(PrepareContext& pc) override {
    if (!pc.dry_run && engine_) search_.start(params(), *engine_);
  }

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
      if (weight[i] == 0) continue;  // contributes nothing, whatever its value
      if (!std::isfinite(weight[i]) || !std::isfinite(v[i].real()) || !std::isfinite(v[i].imag()))
        throw InputError("block " + std::to_string(block->index) + ", visibility " + std::to_string(i) +
                         ": value or weight is not finite");
      u_.push_back(uu[i]), v_.push_back(vv[i]), w_.push_back(ww[i]);
      c_.push_back(v[i] * weight[i]);
      sum_weight_ += weight[i];
    }
    if (std::int64_t(c_.size()) >= params().pass_visibilities) image_pass(ctx, false);
  }

  void finish(Context& ctx) override {
    if (!obs_) throw std::runtime_error("grid.wstack: no visibility block arrived");
    if (!(sum_weight_ > 0)) throw std::runtime_error("grid.wstack: the weights sum to 0: no visibility was gridded");
    image_pass(ctx, true);
    const int n = engine_->options().image_size;
    auto img = std::make_shared<Image>();
    img->nx = img->ny = n;
    img->pixels = Array<float>::host(std::size_t(n) * n);
    for (std::size_t i = 0; i < acc_.size(); ++i) img->pixels[i] = float(acc_[i] / sum_weight_);
    img->wcs = sky_wcs(*obs_, engine_->options().cell_rad);
    ctx.add_work({.visibilities = imaged_, .updates = updates_});
    ctx.emit(image, img);
  }

 private:
  // The visibilities held so far, imaged over every w-plane and added to acc_ (each pass's image is
  // corrected by the engine, so passes add up to the image of all); the first pass fixes the engine.
  void image_pass(Context& ctx, bool at_end) {
    if (c_.empty()) return;
    if (!engine_chosen_) {
      double min_w = std::numeric_limits<double>::infinity(), max_w = 0;
      for (float w : w_) min_w = std::min(min_w, std::abs(double(w))), max_w = std::max(max_w, std::abs(double(w)));
      search_.wait();
      engine_.emplace(first_pass_engine(*engine_, params(), obs_.get(), at_end, double(c_.size()), min_w, max_w,
                                        {"cpu", tbb::this_task_arena::max_concurrency()}, ctx.stage_id()));
      engine_chosen_ = true;
    }
    wstack::Stats st;
    std::vector<double> acc = engine_->grid(u_.data(), v_.data(), w_.data(), c_.data(), c_.size(), &st);
    const es::Kernel& k = engine_->kernel();
    spdlog::info("grid.wstack '{}': pass {}, {} visibilities, epsilon {:g}: ES kernel W {} (beta {:.2f} W), {} w-planes "
                 "of {}^2 cells; {:.2f} s sorting, {:.2f} s gridding, {:.2f} s FFTs, {:.2f} s screens", ctx.stage_id(),
                 ++passes_, c_.size(), engine_->options().epsilon, k.support, k.beta / k.support, st.planes,
                 engine_->grid_size(), st.sort_s, st.grid_s, st.fft_s, st.screen_s);
    if (acc_.empty())
      acc_ = std::move(acc);  // the first (usually only) pass is the sum
    else
      for (std::size_t i = 0; i < acc.size(); ++i) acc_[i] += acc[i];
    imaged_ += double(c_.size());
    updates_ += st.updates;
    u_.clear(), v_.clear(), w_.clear(), c_.clear();
  }

  std::optional<wstack::Engine> engine_;
  bool engine_chosen_ = false;
  PaddingSearch search_;
  std::shared_ptr<const Observation> obs_;
  std::vector<float> u_, v_, w_;
  std::vector<cfloat> c_;
  double sum_weight_ = 0, imaged_ = 0, updates_ = 0;
  std::vector<double> acc_;
  int passes_ = 0;
};

}  // namespace

// The estimate (choose: auto): wstack::predicted_seconds, at the padding the stage will use.
Estimate estimate(const Params& p, const PortShapes& in, const EstimateContext& c) {
  const double n = estimated_visibilities(in, vis.name);
  const Observation& obs = *in.find(vis.name)->second.obs;
  const wstack::Engine e = padded_for_data(make_engine(p), p, n, obs.min_abs_w, obs.max_abs_w, c, "estimate");
  const double passes = passes_for(p, n);
  char basis[192];
  std::snprintf(basis, sizeof basis, "%.3g visibilities in %g pass(es), padding %g, W %d, %d planes of %d^2 cells", n,
                passes, e.options().padding, e.kernel().support, e.planes(obs.min_abs_w, obs.max_abs_w).count, e.grid_size());
  return {.seconds = wstack::predicted_seconds(e, n, obs.min_abs_w, obs.max_abs_w, c, passes), .error = p.epsilon,
          .basis = basis};
}

StageSpec spec() { return decl.spec({cpu_backend<WStackGridder>(), UVFLOW_CUDA_BACKEND(make_cuda)}, estimate); }

}  // namespace uvflow::grid_wstack
