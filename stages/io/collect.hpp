// The results of a run for the program that runs it: io.collect keeps every payload it receives
// under a name (stages/shared/array_feed), where the Python module takes them as NumPy arrays
// (images with their WCS as a FITS header) or, for device payloads, as CUDA arrays (CuPy).
#pragma once

#include <string>

#include "runtime/stage_decl.hpp"

namespace uvflow::io_collect {

inline const PortSpec data{"data", kAnyPayload, Arity::stream, Residency::any,
                           "payloads of any type (Image, VisBlock, ...), where they are: host or device"};

struct Params {
  std::string name;
};

inline const StageDecl<Params> decl{
    .type = "io.collect",
    .summary = "keep the payloads it receives for the program that runs the pipeline (Python: NumPy, CuPy)",
    .doc = "Every payload is kept, in item order, under `name`; Python's Pipeline.run returns them (result[name]): "
           "an Image as a uvflow.Image (pixels as a NumPy array, or a CUDA array for device images, and its WCS as "
           "a FITS header), VisBlocks as one dict of NumPy arrays. Payloads stay where they are: device images are "
           "not copied to the host. Run from the command line, what it keeps is dropped at the end.",
    .inputs = {data},
    .params = {{&Params::name, {.name = "name", .doc = "the name the results are returned under", .required = true}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();

}  // namespace uvflow::io_collect
