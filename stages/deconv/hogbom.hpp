// Hogbom CLEAN, the minor cycle: components found one at a time at the peak of the residual, each
// subtracting gain times the PSF centred on it. One call deconvolves one dirty image (one major
// cycle); the loop over major cycles is the pipeline's, not this stage's.
#pragma once

#include "stages/shared/minor_cycle.hpp"

namespace uvflow::deconv_hogbom {

inline constexpr auto dirty = clean::kDirty;
inline constexpr auto psf = clean::kPsf;
inline constexpr auto model = clean::kModel;
inline constexpr auto residual = clean::kResidual;
inline constexpr auto model_so_far = clean::kModelSoFar;
inline constexpr auto control = clean::kControl;
inline constexpr auto figures = clean::kFigures;

// gain, niter, threshold, mask, boxes and components (stages/shared/minor_cycle.hpp)
using Params = clean::MinorCycleParams;

inline const StageDecl<Params> decl{
    .type = "deconv.hogbom",
    .summary = "Hogbom CLEAN (minor cycle): model and residual images from a dirty image and its PSF",
    .doc = "Repeats: find the pixel of largest |residual| within the mask (ties: the first in memory order, so "
           "runs agree), add gain * peak / psf(centre) to the model there and subtract that times the PSF "
           "centred there, over the overlap of the PSF and the image (a PSF of twice the image size reaches "
           "every pixel from any peak; a smaller one leaves the far sidelobes unsubtracted). Stops after niter "
           "components or when the peak |residual| is at most threshold (Jy/beam). The mask is the union of "
           "the FITS image `mask` (non-zero pixels; it must be the dirty image's size) and the pixel boxes "
           "`boxes` (corners included, 0-based as the image's pixels); neither: every pixel. The model (JY/PIXEL) "
           "and the residual carry the dirty image's sky coordinates. With `components`, each component is "
           "written to that text file, one line per iteration: x, y, flux (Jy), the peak residual it was found "
           "at, and the total flux cleaned so far; the totals are logged. In a loop's body (the major cycles of "
           "pipelines/clean_image.yaml), `model` brings the model so far (the output model adds to it), `control` "
           "the loop's stop settings for the cycle (the call also stops at the loop's threshold, at threshold_sigma "
           "times the residual's robust RMS and at (1 - major_gain) times its starting peak, and makes at most the "
           "components the loop has left), and `figures` tells the loop what the call did. The cuda backend keeps the "
           "images on the device (a loop's state stays there between major cycles): a block-level argmax reduction "
           "finds the peak (the same tie rule) and the subtraction is one fma per pixel on both backends, so they "
           "find the same components in the same order (tests/gpu_deconv_test.cpp). Tested against a direct "
           "implementation on random point-source skies convolved with random array-like PSFs (sources "
           "recovered at their pixels within 1 % of their fluxes), for the threshold, niter and mask, and in "
           "pipelines/clean_image.yaml.",
    .inputs = {dirty, psf, model_so_far, control},
    .outputs = {model, residual, figures},
    .params = clean::minor_cycle_params<Params>(),
    .describe = [](const Params&, const PortShapes& in) { return clean::minor_cycle_shapes(in); },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // hogbom.cu
#endif

}  // namespace uvflow::deconv_hogbom
