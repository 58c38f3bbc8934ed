#include "tests/support/fits_read.hpp"

#include <fitsio.h>

#include <stdexcept>

namespace uvflow::test {

FitsImage read_fits_image(const std::filesystem::path& p) {
  fitsfile* f = nullptr;
  int status = 0;
  fits_open_file(&f, p.c_str(), READONLY, &status);
  FitsImage img;
  long naxes[4] = {1, 1, 1, 1};
  int naxis = 0;
  fits_get_img_dim(f, &naxis, &status);
  fits_get_img_size(f, 4, naxes, &status);
  img.nx = naxes[0];
  img.ny = naxes[1];
  img.pixels.resize(std::size_t(img.nx * img.ny));
  long first[4] = {1, 1, 1, 1};
  int anynul = 0;
  fits_read_pix(f, TFLOAT, first, long(img.pixels.size()), nullptr, img.pixels.data(), &anynul, &status);
  int s2 = 0;
  if (f) fits_close_file(f, &s2);
  if (status) throw std::runtime_error("cannot read FITS image " + p.string() + " (cfitsio status " + std::to_string(status) + ")");
  return img;
}

}  // namespace uvflow::test
