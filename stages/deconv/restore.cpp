#include "stages/deconv/restore.hpp"

#include <spdlog/spdlog.h>

#include <cmath>

#include "runtime/error.hpp"
#include "stages/shared/clean.hpp"

namespace uvflow::deconv_restore {

clean::Gaussian checked_beam(const Params& pr, const Image& m, const Image& r, const Image& p) {
  if (!m.consistent() || !r.consistent() || m.nx != r.nx || m.ny != r.ny)
    throw InputError("deconv.restore: the model (" + std::to_string(m.nx) + " x " + std::to_string(m.ny) +
                     ") and the residual (" + std::to_string(r.nx) + " x " + std::to_string(r.ny) +
                     ") must be images of the same size");
  if (r.wcs && p.wcs && std::abs(r.wcs->cell_rad - p.wcs->cell_rad) > 1e-9 * r.wcs->cell_rad)
    throw InputError("deconv.restore: the PSF's cell (" + std::to_string(p.wcs->cell_rad) +
                     " rad) differs from the residual's (" + std::to_string(r.wcs->cell_rad) + " rad)");
  return pr.beam_fit == "wsclean" ? clean::fit_wsclean(p, pr.fit_threshold, pr.fit_box_beams, "deconv.restore")
                                  : clean::fit_main_lobe(p, pr.fit_threshold, "deconv.restore");
}

void set_beam(Image& out, const clean::Gaussian& g, const std::string& stage) {
  if (!out.wcs) return;
  out.wcs->bunit = "JY/BEAM";
  out.wcs->beam = clean::to_beam(g, out.wcs->cell_rad);
  spdlog::info("{}: restoring beam {:.4g} x {:.4g} arcsec, position angle {:.2f} deg", stage, out.wcs->beam->bmaj_deg * 3600,
               out.wcs->beam->bmin_deg * 3600, out.wcs->beam->bpa_deg);
}

namespace {

class Restore : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto m = ctx.in(model);
    auto r = ctx.in(residual);
    auto p = ctx.in(psf);
    const clean::Gaussian g = checked_beam(params(), *m, *r, *p);
    auto out = std::make_shared<Image>(*r);
    out->pixels = Array<float>::host(r->pixels.size());
    clean::restore(m->pixels.data(), r->pixels.data(), out->pixels.data(), r->nx, r->ny, g);
    set_beam(*out, g, ctx.stage_id());
    ctx.emit(restored, out);
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<Restore>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::deconv_restore
