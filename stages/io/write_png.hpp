// io.write_png: an 8-bit greyscale preview of an image, for a quick look without a FITS viewer.
//
//   in   image  Image, stream, host
//   params
//     path            output file ({index} as in io.write_fits)
//     stretch         asinh (default: faint sidelobes and bright sources both visible) | linear
//     low_percentile  pixel value shown black, as a percentile of the image (default 0.5)
//     high_percentile pixel value shown white (default 99.99)
//     asinh_softening how strongly asinh lifts faint values (default 20)
//
// Rows are flipped so the PNG shows north up, like a FITS viewer (image row 0 is the bottom).
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec write_png_spec();

}  // namespace uvflow
