// What the minor-cycle stages (deconv.hogbom, deconv.clark) have alike: their ports (the loop's
// model so far and control in, figures out, all optional to connect), the parameters
// every one of them has (MinorCycleParams, which a stage's Params is or derives from), their
// output shapes, and the backends around the algorithm (MinorCycleStage; the cuda backends'
// MinorCycleCuda is in minor_cycle_cuda.cuh).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/payloads/cycle.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/shared/clean.hpp"

namespace uvflow::clean {

inline constexpr In<Image> kDirty{
    .name = "dirty", .arity = Arity::once, .residency = Residency::backend, .doc = "the (grid-corrected) dirty image"};
inline constexpr In<Image> kPsf{
    .name = "psf",
    .arity = Arity::once,
    .residency = Residency::backend,
    .doc = "the dirty beam centred on pixel (nx/2, ny/2): twice the image's size covers every pixel"};
inline constexpr In<Image> kModelSoFar{
    .name = "model",
    .arity = Arity::once,
    .residency = Residency::backend,
    .doc = "the model so far (a loop's state), of the dirty image's size: the output model is it plus this call's "
           "components",
    .optional = true};
inline constexpr In<CycleControl> kControl{
    .name = "control",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "a loop's settings for this cycle (LOOP.control): the call also stops at the loop's threshold, "
           "threshold_sigma x the noise, (1 - major_gain) x its starting peak, and after the components the loop has left",
    .optional = true};
inline constexpr Out<Image> kModel{
    .name = "model", .arity = Arity::once, .residency = Residency::backend, .doc = "the clean components, Jy per pixel"};
inline constexpr Out<Image> kResidual{.name = "residual",
                                      .arity = Arity::once,
                                      .residency = Residency::backend,
                                      .doc = "the dirty image less the components' PSFs"};

inline constexpr Out<CycleFigures> kFigures{
    .name = "figures",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "what the call did: peak |residual| before and after, the noise, the flux cleaned, the components (a "
           "loop's `figures`)"};

struct MinorCycleParams {
  double gain = 0.1;
  std::int64_t niter = 1000;
  double threshold = 0;
  std::optional<std::filesystem::path> mask;
  std::vector<Record> boxes;
  std::optional<std::filesystem::path> components;
};

// The specs of MinorCycleParams' members, as parameters of P (doc: the text its stage doc refers to).
template <class P>
std::vector<Field<P>> minor_cycle_params() {
  using M = MinorCycleParams;
  static_assert(std::is_base_of_v<M, P>);
  // Field<P> takes members of P: &M::gain converts to one (base to derived) where P derives from M.
  auto of = []<class T>(T M::*member) -> T P::* { return member; };
  return {{of(&M::gain), {.name = "gain", .min = 1e-6, .max = 1, .doc = "loop gain: the fraction of the peak taken per component"}},
          {of(&M::niter), {.name = "niter", .min = 0, .max = 1e9, .doc = "most components"}},
          {of(&M::threshold), {.name = "threshold", .unit = "Jy", .min = 0, .doc = "stop when the peak |residual| is at most this"}},
          {of(&M::mask),
           {.name = "mask",
            .doc = "FITS image of the dirty image's size: components only where it is non-zero",
            .role = PathRole::input}},
          {of(&M::boxes),
           {.name = "boxes",
            .fields = {{.name = "x0", .type = ParamType::number, .unit = "pixels", .doc = "first column"},
                       {.name = "y0", .type = ParamType::number, .unit = "pixels", .doc = "first row"},
                       {.name = "x1", .type = ParamType::number, .unit = "pixels", .doc = "last column"},
                       {.name = "y1", .type = ParamType::number, .unit = "pixels", .doc = "last row"}},
            .doc = "pixel boxes where components may be (with `mask`: either)"}},
          {of(&M::components),
           {.name = "components", .doc = "text file of the components and per-iteration figures", .role = PathRole::output}}};
}

// Model and residual have the dirty image's size.
inline PortShapes minor_cycle_shapes(const PortShapes& in) {
  auto it = in.find(kDirty.name);
  if (it == in.end() || !it->second.sized()) return PortShapes{};
  const PortShape s{.nx = it->second.nx, .ny = it->second.ny};
  return PortShapes{{std::string(kModel.name), s}, {std::string(kResidual.name), s}};
}

// What every minor-cycle backend has: the mask from `mask` and `boxes` (checked in prepare() when
// the dirty image's size is known).
template <const auto& decl>
class MinorCycleBase : public DeclaredStage<decl> {
 public:
  using Params = typename DeclaredStage<decl>::Params;
  void check(const Params& p) override {
    mask_ = MaskSource(p.mask ? p.mask->string() : "", boxes_of(p.boxes, "boxes"));
  }
  void prepare(PrepareContext& pc) override {
    if (const PortShape& s = pc.input(kDirty); s.sized() && !mask_.all()) mask_.get(s.nx, s.ny);
  }

 protected:
  MaskSource mask_;
};

// A cpu minor-cycle backend: run_minor_cycle() around the derived class's algorithm, model and
// residual emitted.
template <const auto& decl>
class MinorCycleStage : public MinorCycleBase<decl> {
 public:
  using Params = typename DeclaredStage<decl>::Params;
  void process(Context& ctx) override {
    auto d = ctx.in(kDirty);
    auto p = ctx.in(kPsf);
    auto so_far = ctx.connected(kModelSoFar) ? ctx.in(kModelSoFar) : nullptr;
    auto control = ctx.connected(kControl) ? ctx.in(kControl) : nullptr;
    const Params& pr = this->params();
    auto out = run_minor_cycle(ctx, decl.type, *d, so_far.get(), control.get(), pr.threshold, pr.niter, this->mask_,
                               pr.components ? pr.components->string() : "",
                               [&](float* res, float* mod, const std::vector<std::uint8_t>& mask, const Limits& limits) {
                                 return clean(res, mod, *d, *p, mask, limits, [&] { return ctx.cancelled(); });
                               });
    if (!out) return;
    ctx.emit(kModel, out->model);
    ctx.emit(kResidual, out->residual);
    ctx.emit(kFigures, out->figures);
  }

 protected:
  // Cleans `residual` (the dirty image on entry) into `model` (added to) with params(), stopping at
  // `limits` (which replace params()' threshold and niter).
  virtual MinorCycle clean(float* residual, float* model, const Image& dirty, const Image& psf,
                           const std::vector<std::uint8_t>& mask, const Limits& limits,
                           const std::function<bool()>& cancelled) = 0;
};

}  // namespace uvflow::clean
