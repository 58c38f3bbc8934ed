// image.psf: the stray-light point spread function, made once per run.
//
//   out  psf  Image, once, host: size_x x size_y pixels, centre at pixel (size_x/2, size_y/2)
//   params
//     source          file | model (default model)
//     path            file: a FITS image (2-D, or the first plane of a cube)
//     size_x, size_y  model: PSF size, pixels (default 63 x 63)
//     core_sigma      model: standard deviation of the Gaussian core, pixels (default 1.5)
//     wing_amplitude  model: the wings' value at the centre, relative to the core peak (default 1e-3)
//     wing_index      model: power-law exponent n of the wings, which fall as r^-n (default 3)
//     normalise       scale the PSF to sum 1 (default true)
//
// The model is exp(-r^2 / (2 core_sigma^2)) + wing_amplitude * (1 + r^2 / core_sigma^2)^(-n/2),
// r measured from the centre pixel, which is where image.psf_convolve (Listing 4.1's kY/2, kX/2
// shift) maps a frame pixel onto itself. prepare() builds and validates the PSF, so a NaN, an
// infinity or an all-zero PSF is reported by `uvflow check` and before a run starts.
#pragma once

#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec psf_spec();

namespace psf {

// Throws InputError, starting with `where` (e.g. "file psf.fits, HDU 1"), when the PSF has no
// pixels, a NaN or infinite pixel (the first one is named), or no non-zero pixel. Every stage that
// takes a PSF checks it with this, so the messages are the same wherever the PSF came from.
void validate(const Image& psf, const std::string& where);

}  // namespace psf
}  // namespace uvflow
