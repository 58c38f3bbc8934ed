// What the minor-cycle stages (deconv.hogbom, deconv.clark) have alike: their ports, the parameters
// every one of them has (a Params struct with members gain, niter, threshold, mask, boxes and
// components), their output shapes, and the backend around the algorithm (MinorCycleStage).
#pragma once

#include <string>
#include <vector>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/shared/clean.hpp"

namespace uvflow::clean {

inline constexpr In<Image> kDirty{
    .name = "dirty", .arity = Arity::once, .residency = Residency::host, .doc = "the (grid-corrected) dirty image"};
inline constexpr In<Image> kPsf{
    .name = "psf",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "the dirty beam centred on pixel (nx/2, ny/2): twice the image's size covers every pixel"};
inline constexpr Out<Image> kModel{
    .name = "model", .arity = Arity::once, .residency = Residency::host, .doc = "the clean components, Jy per pixel"};
inline constexpr Out<Image> kResidual{.name = "residual",
                                      .arity = Arity::once,
                                      .residency = Residency::host,
                                      .doc = "the dirty image less the components' PSFs"};

// The parameters every minor-cycle stage has (doc: the text its stage doc refers to).
template <class P>
std::vector<Field<P>> minor_cycle_params() {
  return {{&P::gain, {.name = "gain", .min = 1e-6, .max = 1, .doc = "loop gain: the fraction of the peak taken per component"}},
          {&P::niter, {.name = "niter", .min = 0, .max = 1e9, .doc = "most components"}},
          {&P::threshold, {.name = "threshold", .unit = "Jy", .min = 0, .doc = "stop when the peak |residual| is at most this"}},
          {&P::mask,
           {.name = "mask",
            .doc = "FITS image of the dirty image's size: components only where it is non-zero",
            .role = PathRole::input}},
          {&P::boxes,
           {.name = "boxes",
            .fields = {{.name = "x0", .type = ParamType::number, .unit = "pixels", .doc = "first column"},
                       {.name = "y0", .type = ParamType::number, .unit = "pixels", .doc = "first row"},
                       {.name = "x1", .type = ParamType::number, .unit = "pixels", .doc = "last column"},
                       {.name = "y1", .type = ParamType::number, .unit = "pixels", .doc = "last row"}},
            .doc = "pixel boxes where components may be (with `mask`: either)"}},
          {&P::components,
           {.name = "components", .doc = "text file of the components and per-iteration figures", .role = PathRole::output}}};
}

// Model and residual have the dirty image's size.
inline PortShapes minor_cycle_shapes(const PortShapes& in) {
  auto it = in.find(kDirty.name);
  if (it == in.end() || !it->second.sized()) return PortShapes{};
  const PortShape s{.nx = it->second.nx, .ny = it->second.ny};
  return PortShapes{{std::string(kModel.name), s}, {std::string(kResidual.name), s}};
}

// A minor-cycle backend: the mask from `mask` and `boxes` (checked in prepare() when the dirty
// image's size is known), run_minor_cycle() around the derived class's algorithm, model and
// residual emitted.
template <const auto& decl>
class MinorCycleStage : public DeclaredStage<decl> {
 public:
  using Params = typename DeclaredStage<decl>::Params;
  void check(const Params& p) override {
    mask_ = MaskSource(p.mask ? p.mask->string() : "", boxes_of(p.boxes, "boxes"));
  }
  void prepare(PrepareContext& pc) override {
    if (const PortShape& s = pc.input(kDirty); s.sized()) mask_.get(s.nx, s.ny);
  }
  void process(Context& ctx) override {
    auto d = ctx.in(kDirty);
    auto p = ctx.in(kPsf);
    const Params& pr = this->params();
    auto out = run_minor_cycle(ctx, decl.type, *d, mask_, pr.components ? pr.components->string() : "",
                               [&](float* res, float* mod, const std::vector<std::uint8_t>& mask) {
                                 return clean(res, mod, *d, *p, mask, [&] { return ctx.cancelled(); });
                               });
    if (!out) return;
    ctx.emit(kModel, out->model);
    ctx.emit(kResidual, out->residual);
  }

 protected:
  // Cleans `residual` (the dirty image on entry) into `model` (zero on entry) with params().
  virtual MinorCycle clean(float* residual, float* model, const Image& dirty, const Image& psf,
                           const std::vector<std::uint8_t>& mask, const std::function<bool()>& cancelled) = 0;

 private:
  MaskSource mask_;
};

}  // namespace uvflow::clean
