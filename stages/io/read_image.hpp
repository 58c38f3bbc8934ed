// The model image of a prediction chain (io.read_image -> image.grid_correct ->
// fft.image_to_grid -> degrid.*): one FITS image with the sky coordinates io.write_fits writes,
// checked in prepare() so that `uvflow check` reports a header that does not fit. The size and
// cell are checked against the kernels by fft.image_to_grid; the phase centre against the
// observation here, when `info` is connected.
#pragma once

#include <cstdint>
#include <filesystem>

#include "runtime/payloads/image.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_read_image {

inline constexpr In<VisSetInfo> info{
    .name = "info",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "the observation the model is predicted for: its phase centre must be the image's (optional)",
    .optional = true};
inline constexpr Out<Image> image{
    .name = "image", .arity = Arity::once, .residency = Residency::host, .doc = "the image with its SkyWcs"};

struct Params {
  std::filesystem::path path;
  std::int64_t hdu = 0;
};

inline const StageDecl<Params> decl{
    .type = "io.read_image",
    .summary = "read one FITS sky image (a model) with its celestial coordinates",
    .doc = "Reads a square image in the orthographic projection as io.write_fits and WSClean write it: CTYPE1 "
           "RA---SIN and CTYPE2 DEC--SIN, the phase centre (CRVAL1, CRVAL2) at the reference pixel CRPIX = N/2 + 1 "
           "where fft.grid_to_image puts it, square pixels with CDELT1 = -CDELT2 < 0 (RA increasing to the left), "
           "degrees, no rotation (CROTA2, PC1_2, PC2_1 absent or 0, no CD matrix), and one plane (further axes, "
           "FREQ and STOKES, of length 1). Pixels are read as float with BSCALE/BZERO applied; for a prediction "
           "they are Jy per pixel (WSClean's -model.fits), whatever BUNIT says (kept in the SkyWcs). The header "
           "is checked in prepare(), so `uvflow check` reports it: a file that is not such an image is an input "
           "error naming the file, HDU and keyword. An undefined or non-finite pixel is an input error naming "
           "it. With `info` connected, the image's phase centre must be the observation's (within a thousandth "
           "of a pixel); without it the image is emitted at the start of the run. Tested on images io.write_fits "
           "wrote, headers edited keyword by keyword, and WSClean's model images.",
    .inputs = {info},
    .outputs = {image},
    .params = {{&Params::path, {.name = "path", .doc = "the FITS file", .required = true, .role = PathRole::input}},
               {&Params::hdu,
                {.name = "hdu",
                 .min = 0,
                 .max = 1e6,
                 .doc = "HDU to read, 1-based as cfitsio counts; 0: the primary array, or the first extension when "
                        "the primary is empty"}}},
};

StageSpec spec();

}  // namespace uvflow::io_read_image
