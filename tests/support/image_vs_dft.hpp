// Images a small simulated observation through a real pipeline and compares the result with a
// direct DFT of the same visibilities. Used by the accuracy test and by bench/image_accuracy.
#pragma once

#include <string>
#include <vector>

namespace uvflow::test {

struct PointSource {
  int dx, dy;  // pixels from the image centre: l = -dx cells (RA to the left), m = dy cells
  double flux;
};

struct ImageVsDft {
  double rms_over_peak = 0;    // RMS of (image - DFT) over the inner 80 %, / brightest DFT peak
  double rel_l2 = 0;           // ||image - DFT|| / ||DFT|| over the whole image
  double worst_peak_error = 0; // max over sources of |image - DFT| / |DFT| at the source pixel
  bool peaks_on_pixel = true;  // each source pixel is the brightest within 2 pixels
};

struct ImagingSetup {
  int npix = 128;
  double cell_arcsec = 400;       // a 14 degree field with the tiny preset: the w-term matters
  std::string preset = "tiny";
  std::string gridder = "tiled";  // tiled, serial or atomic (cpu backends)
  std::vector<std::string> sets;  // extra --set overrides, e.g. "kernels.oversample=8"
};

ImageVsDft image_vs_dft(const ImagingSetup& setup, const std::vector<PointSource>& sky);

std::string sky_to_yaml(const std::vector<PointSource>& sky, double cell_arcsec);

}  // namespace uvflow::test
