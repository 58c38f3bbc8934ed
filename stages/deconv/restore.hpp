// The restored image: the clean components convolved with an elliptical Gaussian fitted to the
// PSF's main lobe, plus the residual; the fitted beam travels with the image to io.write_fits
// (BMAJ, BMIN, BPA).
#pragma once

#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/shared/clean.hpp"

namespace uvflow::deconv_restore {

inline constexpr In<Image> model{
    .name = "model", .arity = Arity::once, .residency = Residency::backend, .doc = "clean components, Jy per pixel"};
inline constexpr In<Image> residual{
    .name = "residual", .arity = Arity::once, .residency = Residency::backend, .doc = "the residual image, same size"};
inline constexpr In<Image> psf{
    .name = "psf", .arity = Arity::once, .residency = Residency::host, .doc = "the dirty beam centred on (nx/2, ny/2)"};
inline constexpr Out<Image> restored{
    .name = "image", .arity = Arity::once, .residency = Residency::backend, .doc = "the restored image, JY/BEAM, with its beam"};

struct Params {
  std::string beam_fit = "main_lobe";
  double fit_threshold = 0.35;
  double fit_box_beams = 10;
};

inline const StageDecl<Params> decl{
    .type = "deconv.restore",
    .summary = "restored image: model convolved with the fitted beam, plus the residual",
    .doc = "Fits a peak-1 elliptical Gaussian, centred on the PSF's centre pixel, to the PSF's main lobe (the "
           "pixels connected to the centre at or above fit_threshold of its value, and the 3 x 3 around it) by "
           "least squares (Levenberg-Marquardt from a log-linear start); with beam_fit wsclean, refits it as "
           "WSClean 3 does (-fit-beam): to every pixel of a box fit_box_beams beams across (WSClean's "
           "-beam-fitting-size) of which WSClean's fitter counts only the quadrant right of and above the centre "
           "(offsets computed in unsigned arithmetic wrap left of and below it), which gives WSClean's beam to "
           "0.1 % and 0.1 degree (tests/wsclean_clean_test.cpp; docs/deconvolution.md). It convolves the model with it (a component "
           "of S Jy becomes a Gaussian of peak S Jy/beam) and adds the residual. The image carries the residual's "
           "sky coordinates and the beam (FWHM axes in degrees, position angle in degrees east of north, as FITS "
           "BMAJ, BMIN, BPA and WSClean write them), which io.write_fits writes into the header; the beam is "
           "also logged. The PSF must have the residual's cell size. Tested on analytic elliptical Gaussians of "
           "known axes and angle (axes within 1 %, angle within 1 degree) and against a direct convolution. The "
           "cuda backend fits the beam on the host (the PSF is read there) and restores on the device, the model "
           "and the residual read and the restored image made there (a large image then crosses the bus once, "
           "restored, not twice); its Gaussians are summed in single precision (the cpu backend's in double), "
           "against which tests/gpu_deconv_test.cpp holds it.",
    .inputs = {model, residual, psf},
    .outputs = {restored},
    .params = {{&Params::beam_fit,
                {.name = "beam_fit",
                 .choices = {"main_lobe", "wsclean"},
                 .doc = "main_lobe: fit the main lobe; wsclean: WSClean's fit (see above), for comparing with WSClean"}},
               {&Params::fit_box_beams,
                {.name = "fit_box_beams",
                 .min = 1,
                 .max = 1000,
                 .doc = "beam_fit wsclean: the fitting box's side in beams (WSClean's -beam-fitting-size, default 10)"}},
               {&Params::fit_threshold,
                {.name = "fit_threshold",
                 .min = 0.01,
                 .max = 0.99,
                 .doc = "the main lobe fitted: pixels at or above this fraction of the PSF's peak"}}},
    .describe = [](const Params&, const PortShapes& in) {
      auto it = in.find(residual.name);
      if (it == in.end() || !it->second.sized()) return PortShapes{};
      return PortShapes{{std::string(restored.name), PortShape{.nx = it->second.nx, .ny = it->second.ny}}};
    },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // restore.cu
#endif

// The checks both backends make: model and residual of one size, the PSF of the residual's cell
// (InputError otherwise); and the fitted restoring beam.
clean::Gaussian checked_beam(const Params& p, const Image& model, const Image& residual, const Image& psf);
// `out`'s unit and beam (logged under `stage`), after restoring with `g`.
void set_beam(Image& out, const clean::Gaussian& g, const std::string& stage);

}  // namespace uvflow::deconv_restore
