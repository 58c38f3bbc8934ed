// Dirty images get a WSClean-style celestial header (CRPIX at N/2+1, the phase centre; EQUINOX,
// RADESYS, TELESCOP, DATE-OBS) so that FITS viewers show them as they show WSClean's own.
#pragma once

#include <cstdint>
#include <filesystem>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_write_fits {

inline constexpr In<Image> image{.name = "image", .residency = Residency::host, .doc = "the image(s) to write"};

struct Params {
  std::filesystem::path path;
  std::int64_t bitpix = -32;
};

inline const StageDecl<Params> decl{
    .type = "io.write_fits",
    .summary = "write images to FITS files with a WSClean-style celestial header",
    .doc = "Dirty images are written with 4 axes (RA---SIN, DEC--SIN, FREQ, STOKES), the phase centre at "
           "pixel N/2+1, CDELT1 < 0 so RA increases to the left, BUNIT JY/BEAM: DS9, CARTA and WSClean users "
           "see the same orientation as WSClean's own images. Images without sky coordinates (frames) are plain "
           "2-D arrays. Files are written under a temporary name and appear only when the whole run succeeds.",
    .inputs = {image},
    .params = {{&Params::path,
                {.name = "path",
                 .doc = "output file; {index} is replaced by the item index (00000, 00001, ...) and is required for "
                        "streams",
                 .required = true,
                 .role = PathRole::output_per_item}},
               {&Params::bitpix, {.name = "bitpix", .min = -64, .max = -32, .doc = "-32 for float32 pixels, -64 for float64"}}},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();

}  // namespace uvflow::io_write_fits
