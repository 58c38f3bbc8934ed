// Rows are flipped so the PNG shows north up, like a FITS viewer (image row 0 is the bottom).
#pragma once

#include <filesystem>
#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_write_png {

inline constexpr In<Image> image{.name = "image", .residency = Residency::host, .doc = "the image(s) to preview"};

struct Params {
  std::filesystem::path path;
  std::string stretch = "asinh";
  double low_percentile = 0.5;
  double high_percentile = 99.99;
  double asinh_softening = 20.0;
};

inline const StageDecl<Params> decl{
    .type = "io.write_png",
    .summary = "write an 8-bit greyscale PNG preview of an image (north up, RA to the left)",
    .doc = "Pixel values between two percentiles of the image are mapped to black..white, through an asinh "
           "stretch by default so that both faint sidelobes and bright sources are visible. Non-finite pixels "
           "are black. The file appears only when the whole run succeeds.",
    .inputs = {image},
    .params = {{&Params::path, {.name = "path",
                                 .doc = "output file; {index} as in io.write_fits",
                                 .required = true,
                                 .role = PathRole::output_per_item}},
               {&Params::stretch, {.name = "stretch", .choices = {"asinh", "linear"}, .doc = "intensity mapping"}},
               {&Params::low_percentile,
                {.name = "low_percentile", .unit = "%", .min = 0, .max = 100, .doc = "value shown black"}},
               {&Params::high_percentile,
                {.name = "high_percentile", .unit = "%", .min = 0, .max = 100, .doc = "value shown white"}},
               {&Params::asinh_softening,
                {.name = "asinh_softening",
                 .min = 0.1,
                 .max = 1e6,
                 .doc = "asinh stretch strength (larger lifts faint values more)"}}},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();

}  // namespace uvflow::io_write_png
