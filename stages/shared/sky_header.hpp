// The celestial FITS keywords of a sky image, as io.write_fits writes them, for every place that
// shows an image's coordinates (the file, and the header the Python module returns with an image's
// pixels), so that they agree.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "runtime/payloads/image.hpp"

namespace uvflow::fits {

struct Card {
  std::string key;
  std::variant<double, std::string> value;
  std::string comment;
};

// WSClean-style: RA---SIN/DEC--SIN/FREQ/STOKES, the phase centre at pixel N/2+1, CDELT1 < 0.
// Empty for an image without a WCS.
std::vector<Card> sky_header(const Image& img);

}  // namespace uvflow::fits
