#include "stages/degrid/wstack.hpp"

#include <cmath>
#include <optional>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "runtime/error.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::degrid_wstack {

void check_epsilon(const Params& p) {
  try {
    es::choose(p.epsilon, p.padding);
  } catch (const std::invalid_argument& e) {
    throw ParamError("epsilon", e.what());
  }
}

wstack::Engine make_engine(const Image& img, const Params& p) {
  if (!img.consistent() || img.nx != img.ny || img.nx % 2 || !img.wcs || !(img.wcs->cell_rad > 0))
    throw InputError("degrid.wstack: the model image must be square with an even side and carry its cell size "
                     "(a SIN WCS); it is " + std::to_string(img.nx) + " x " + std::to_string(img.ny));
  return wstack::Engine(
      wstack::Options{.image_size = img.nx, .cell_rad = img.wcs->cell_rad, .epsilon = p.epsilon, .padding = p.padding});
}

namespace {

class WStackDegridder : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { check_epsilon(p); }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto img = ctx.in(model);
    check_arrays(*block);
    if (!engine_) engine_.emplace(make_engine(*img, params()));
    const float *uu = block->uu.host_data(), *vv = block->vv.host_data(), *ww = block->ww.host_data();
    for (std::size_t i = 0; i < block->size(); ++i)
      if (!std::isfinite(uu[i]) || !std::isfinite(vv[i]) || !std::isfinite(ww[i]))
        throw InputError("block " + std::to_string(block->index) + ", visibility " + std::to_string(i) +
                         ": uvw is not finite");
    auto out = std::make_shared<VisBlock>(*block);
    out->vis = Array<cfloat>::host(block->size());
    wstack::Stats st;
    engine_->degrid(img->pixels.host_data(), uu, vv, ww, block->size(), out->vis.data(), &st);
    spdlog::debug("degrid.wstack '{}': block {}, {} visibilities, W {}, {} w-planes; {:.2f} s sorting, {:.2f} s gathering, "
                  "{:.2f} s FFTs, {:.2f} s screens", ctx.stage_id(), block->index, block->size(), engine_->kernel().support,
                  st.planes, st.sort_s, st.grid_s, st.fft_s, st.screen_s);
    ctx.add_work({.visibilities = double(block->size()), .updates = st.updates});
    ctx.emit(out_vis, out);
  }

 private:
  std::optional<wstack::Engine> engine_;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WStackDegridder>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::degrid_wstack
