// The model is exp(-r^2 / (2 core_sigma^2)) + wing_amplitude * (1 + r^2 / core_sigma^2)^(-n/2),
// r measured from the centre pixel, which is where image.psf_convolve (Listing 4.1's kY/2, kX/2
// shift) maps a frame pixel onto itself. prepare() builds and validates the PSF, so a NaN, an
// infinity or an all-zero PSF is reported by `uvflow check` and before a run starts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::image_psf {

inline constexpr Out<Image> psf{.name = "psf", .arity = Arity::once, .residency = Residency::host, .doc = "the PSF"};

struct Params {
  std::string source = "model";
  std::optional<std::filesystem::path> path;
  std::int64_t size_x = 63;
  std::int64_t size_y = 63;
  double core_sigma = 1.5;
  double wing_amplitude = 1e-3;
  double wing_index = 3.0;
  bool normalise = true;
};

inline const StageDecl<Params> decl{
    .type = "image.psf",
    .summary = "the stray-light PSF, read from a FITS image or made from a Gaussian-core, power-law-wing model",
    .doc = "Made once per run and handed to image.psf_convolve. source: file reads a FITS image (2-D, or the "
           "first plane of a cube; the primary array, or the first extension when the primary is empty). "
           "source: model evaluates exp(-r^2 / (2 core_sigma^2)) + wing_amplitude * (1 + r^2 / core_sigma^2)^"
           "(-wing_index/2) on size_x x size_y pixels, r measured from pixel (size_x/2, size_y/2): the pixel "
           "that image.psf_convolve maps onto itself. The PSF is checked before the run starts (and by `uvflow "
           "check`): a NaN or infinite pixel, or a PSF that is all zero, is an input error naming the file and "
           "HDU. With normalise it is scaled to sum 1, so convolving preserves the total flux of a frame.",
    .outputs = {psf},
    .params = {{&Params::source,
                {.name = "source",
                 .choices = {"file", "model"},
                 .doc = "file: read `path`; model: the parametric PSF below"}},
               {&Params::path, {.name = "path", .doc = "source file: a FITS image", .role = PathRole::input}},
               {&Params::size_x, {.name = "size_x", .unit = "pixels", .min = 1, .max = 65536, .doc = "model: width"}},
               {&Params::size_y, {.name = "size_y", .unit = "pixels", .min = 1, .max = 65536, .doc = "model: height"}},
               {&Params::core_sigma,
                {.name = "core_sigma",
                 .unit = "pixels",
                 .min = 1e-3,
                 .max = 1e5,
                 .doc = "model: standard deviation of the Gaussian core"}},
               {&Params::wing_amplitude,
                {.name = "wing_amplitude",
                 .min = 0,
                 .max = 1e6,
                 .doc = "model: value of the wings at the centre, relative to the core peak"}},
               {&Params::wing_index,
                {.name = "wing_index",
                 .min = 0,
                 .max = 100,
                 .doc = "model: power-law exponent n; far from the core the wings fall as r^-n"}},
               {&Params::normalise, {.name = "normalise", .doc = "scale the PSF to sum 1"}}},
    // The model's size is a parameter; a file's is left to prepare(), which reads it.
    .describe = [](const Params& p, const PortShapes&) {
      if (p.source != "model") return PortShapes{};
      return PortShapes{{std::string(psf.name), PortShape{.nx = int(p.size_x), .ny = int(p.size_y)}}};
    },
};

StageSpec spec();

// Throws InputError, starting with `where` (e.g. "file psf.fits, HDU 1"), when the PSF has no
// pixels, a NaN or infinite pixel (the first one is named), or no non-zero pixel. Every stage that
// takes a PSF checks it with this, so the messages are the same wherever the PSF came from.
void validate(const Image& psf, const std::string& where);

}  // namespace uvflow::image_psf
