// deconv.restore, cuda backend: the beam fitted on the host (checked_beam), the restoring on the
// device images (restore_cuda, stages/shared/clean_cuda.cu).
#include "stages/deconv/restore.hpp"
#include "stages/shared/minor_cycle_cuda.cuh"

namespace uvflow::deconv_restore {
namespace {

class RestoreCuda : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto m = ctx.in(model);
    auto r = ctx.in(residual);
    auto p = ctx.in(psf);
    check_on_device(m->pixels, "deconv.restore (cuda): the model");
    check_on_device(r->pixels, "deconv.restore (cuda): the residual");
    const clean::Gaussian g = checked_beam(params(), *m, *r, *p);
    auto out = std::make_shared<Image>(*r);
    out->pixels = Array<float>::device(r->pixels.size(), ctx.stream());
    clean::restore_cuda(m->pixels.data(), r->pixels.data(), out->pixels.data(), r->nx, r->ny, g, ctx.stream());
    set_beam(*out, g, ctx.stage_id());
    ctx.emit(restored, out);
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<RestoreCuda>(); }

}  // namespace uvflow::deconv_restore
