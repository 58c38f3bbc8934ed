// Images: dirty images with a celestial WCS, and StrayLight frames (no WCS).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/payloads/vis.hpp"

namespace uvflow {

// The restoring beam of a CLEANed image: an elliptical Gaussian, axes as FWHM in degrees, position
// angle of the major axis in degrees east of north (counter-clockwise from +y, RA increasing to the
// left), as FITS BMAJ, BMIN, BPA and WSClean write them.
struct Beam {
  double bmaj_deg = 0, bmin_deg = 0, bpa_deg = 0;
};

// Orthographic (SIN) sky coordinates, as WSClean writes them: RA increases to the left.
struct SkyWcs {
  double ra_rad = 0, dec_rad = 0;  // phase centre, at the reference pixel
  double cell_rad = 0;
  double freq_hz = 0;
  double bandwidth_hz = 0;  // the band imaged, edge to edge; 0: unknown
  std::string bunit = "JY/BEAM";
  std::string telescope, date_obs;
  std::optional<Beam> beam;  // set by deconv.restore; io.write_fits writes BMAJ, BMIN, BPA
};

inline constexpr char kImage[] = "Image";
struct Image : PayloadOf<Image, kImage> {
  std::int64_t index = 0;
  int nx = 0, ny = 0;
  Array<float> pixels;            // [y][x], x fastest; row 0 is the bottom (FITS order)
  std::optional<SkyWcs> wcs;
  // Whether the pixel array holds nx * ny pixels of a non-empty image.
  bool consistent() const { return nx > 0 && ny > 0 && pixels.size() == std::size_t(nx) * std::size_t(ny); }
  template <class F> void each_array(F&& f) { f(pixels); }
};

}  // namespace uvflow
