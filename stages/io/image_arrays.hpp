// Images or frames from arrays a program hands in by name (NumPy, or CuPy and anything with the
// CUDA array interface, in Python; array_feed::put in C++). The cuda backend uses device arrays in
// place, so a stream that is already on the GPU crosses no bus.
#pragma once

#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_image_arrays {

inline constexpr Out<Image> image{
    .name = "image", .arity = Arity::once, .doc = "the first image handed in, once (a model image, say)"};
inline constexpr Out<Image> frames{.name = "frames", .doc = "every image handed in, in order, one per item"};

struct Params {
  std::string name;
};

inline const StageDecl<Params> decl{
    .type = "io.image_arrays",
    .summary = "images or frames from arrays handed in by the program that runs the pipeline (Python: NumPy, CuPy)",
    .doc = "Takes the arrays put under `name` (Python: Pipeline.run(inputs={name: array})): one 2-D array (ny x nx, "
           "row 0 the bottom, as FITS stores it) is one image, a 3-D array a stream of images; with a header "
           "(Python: (array, header), the FITS keywords CRVAL1, CRVAL2, CDELT2, CRVAL3) they are sky images, else "
           "frames. float32 C-contiguous arrays are used in place, others are converted once. The cpu backend "
           "takes host arrays. The cuda backend takes device arrays in place (no copy: the run report shows no "
           "bytes moved) and uploads host arrays itself, counting the bytes. Run from the command line, with no "
           "arrays handed in, the stage is an input error.",
    .outputs = {image, frames},
    .params = {{&Params::name, {.name = "name", .doc = "the name the arrays are handed in under", .required = true}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();

}  // namespace uvflow::io_image_arrays
