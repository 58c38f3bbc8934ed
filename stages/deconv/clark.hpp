// Clark CLEAN, the minor cycle in image-plane cycles: Hogbom with a small PSF patch on the brightest
// pixels only, then the cycle's components subtracted from the whole residual at once by an FFT
// convolution with the whole PSF. Faster than Hogbom on large images with many components.
#pragma once

#include <cstdint>

#include "stages/shared/minor_cycle.hpp"

namespace uvflow::deconv_clark {

inline constexpr auto dirty = clean::kDirty;
inline constexpr auto psf = clean::kPsf;
inline constexpr auto model = clean::kModel;
inline constexpr auto residual = clean::kResidual;
inline constexpr auto model_so_far = clean::kModelSoFar;
inline constexpr auto control = clean::kControl;
inline constexpr auto figures = clean::kFigures;

// gain, niter, threshold, mask, boxes and components (stages/shared/minor_cycle.hpp), and:
struct Params : clean::MinorCycleParams {
  std::int64_t psf_patch = 25;
  double cycle_factor = 3;
};

inline const StageDecl<Params> decl{
    .type = "deconv.clark",
    .summary = "Clark CLEAN (minor cycle): Hogbom on the brightest pixels with a PSF patch, FFT subtraction per cycle",
    .doc = "Each cycle takes the peak |residual| within the mask, selects the pixels above cycle_factor times "
           "the largest PSF sidelobe outside the (2 psf_patch + 1)^2 patch times that peak (at most half the peak, "
           "at least threshold), runs "
           "Hogbom on them alone with the patch until none is above that limit (or until the exterior "
           "sidelobes summed over the cycle's components could reach a quarter of it, beyond which the patch's "
           "values drift from the true residual and the cycle could diverge), then subtracts the cycle's "
           "components from the whole residual by an FFT convolution with the whole PSF (single precision "
           "FFTW on 2nx x 2ny, exact up to rounding: the same overlap of PSF and image as deconv.hogbom). Stops, "
           "masks, outputs and the `components` file as deconv.hogbom's (a component's peak residual is the value "
           "the patch cycle saw). With a patch as large as the PSF it finds Hogbom's components. Tested against "
           "that, against a direct implementation of Hogbom on random skies (fluxes and positions), and for the "
           "residual being exactly dirty - model convolved with the PSF. The cuda backend keeps the images on the "
           "device: the peak search, each cycle's selection of the pixels above its limit and the subtraction "
           "there, the patch cycle on the host by the same code on the selected pixels alone; a cycle's components "
           "are subtracted one by one over their overlap with the PSF (exact, as deconv.hogbom), or by the FFT "
           "convolution (cuFFT) where that moves less memory (many components of a PSF twice the image's size). "
           "The cycle's noise and the model's flux are computed there too, to the cpu backend's values. Against "
           "the cpu backend in tests/gpu_deconv_test.cpp.",
    .inputs = {dirty, psf, model_so_far, control},
    .outputs = {model, residual, figures},
    .params = [] {
      auto f = clean::minor_cycle_params<Params>();
      f.push_back({&Params::psf_patch,
                   {.name = "psf_patch",
                    .unit = "pixels",
                    .min = 1,
                    .max = 65536,
                    .doc = "half-width of the PSF patch of the minor cycle"}});
      f.push_back({&Params::cycle_factor,
                   {.name = "cycle_factor",
                    .min = 1,
                    .max = 100,
                    .doc = "a cycle cleans down to this times the largest sidelobe outside the patch times its "
                           "peak: the sidelobes the patch leaves out add up over a cycle's components (CASA's "
                           "cyclefactor; 1.5 took 5 times as many components as Hogbom on the tests' PSFs, 3 "
                           "about as many)"}});
      return f;
    }(),
    .describe = [](const Params&, const PortShapes& in) { return clean::minor_cycle_shapes(in); },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // clark.cu
#endif

}  // namespace uvflow::deconv_clark
