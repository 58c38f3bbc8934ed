#include "stages/io/read_image.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/shared/fits_image.hpp"

namespace uvflow::io_read_image {
namespace {

// Header values are written with 15 or more significant digits; these tolerances only absorb
// their rounding.
constexpr double kRelTol = 1e-9;
// The image's phase centre and the observation's may differ by this fraction of a pixel.
constexpr double kCentreTolPixels = 1e-3;

std::string num(double v, int digits = 12) {
  std::ostringstream s;
  s.precision(digits);
  s << v;
  return s.str();
}

class ReadImage : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    path_ = p.path.string();
    if (path_.empty()) throw ParamError("path", "must not be empty");
    hdu_ = int(p.hdu);
  }

  // The header only: `uvflow check` reports an image that cannot be a model.
  void prepare(PrepareContext&) override {
    fits::ImageFile f(path_, hdu_);
    f.require_planes();
    where_ = f.where();
    auto bad = [&](const std::string& key, const std::string& what) {
      throw InputError(where_ + ": " + key + " " + what);
    };
    if (f.planes() != 1)
      bad("NAXIS3", "and the axes beyond it give " + std::to_string(f.planes()) + " planes: io.read_image reads one");
    if (f.nx() != f.ny())
      bad("NAXIS1, NAXIS2", "are " + std::to_string(f.nx()) + " and " + std::to_string(f.ny()) +
                                ": a model image must be square");
    n_ = int(f.nx());
    auto text = [&](const char* key) {
      auto v = f.text(key);
      if (!v) bad(key, "is missing");
      return *v;
    };
    auto number = [&](const char* key) {
      auto v = f.number(key);
      if (!v) bad(key, "is missing");
      return *v;
    };
    if (text("CTYPE1") != "RA---SIN") bad("CTYPE1", "is '" + text("CTYPE1") + "', expected 'RA---SIN'");
    if (text("CTYPE2") != "DEC--SIN") bad("CTYPE2", "is '" + text("CTYPE2") + "', expected 'DEC--SIN'");
    for (const char* key : {"CUNIT1", "CUNIT2"})
      if (auto u = f.text(key); u && *u != "deg") bad(key, "is '" + *u + "', expected 'deg'");
    for (const char* key : {"CD1_1", "CD1_2", "CD2_1", "CD2_2"})
      if (f.number(key)) bad(key, "is present: a CD matrix is not read, give CDELT1 and CDELT2");
    for (const char* key : {"CROTA2", "PC1_2", "PC2_1"})
      if (auto v = f.number(key); v && *v != 0) bad(key, "is " + num(*v) + ": a rotated image cannot be a model");
    for (const char* key : {"PC1_1", "PC2_2"})
      if (auto v = f.number(key); v && *v != 1) bad(key, "is " + num(*v) + ", expected 1");
    const double cdelt1 = number("CDELT1"), cdelt2 = number("CDELT2");
    if (!(cdelt2 > 0)) bad("CDELT2", "is " + num(cdelt2) + ": expected a positive cell size, degrees");
    if (std::fabs(cdelt1 + cdelt2) > kRelTol * cdelt2)
      bad("CDELT1", "is " + num(cdelt1) + ", expected -CDELT2 = " + num(-cdelt2) +
                        " (square pixels, RA increasing to the left)");
    // fft.grid_to_image puts the phase centre at 0-based pixel N/2: FITS pixel N/2 + 1.
    const double centre = n_ / 2 + 1;
    for (const char* key : {"CRPIX1", "CRPIX2"})
      if (const double v = number(key); std::fabs(v - centre) > 1e-6)
        bad(key, "is " + num(v) + ", expected " + num(centre) + " (the phase centre at pixel N/2 + 1 of " +
                     std::to_string(n_) + ")");
    const double crval2 = number("CRVAL2");
    if (!(std::fabs(crval2) <= 90)) bad("CRVAL2", "is " + num(crval2) + ": not a declination");
    wcs_.ra_rad = number("CRVAL1") * kDegToRad;
    wcs_.dec_rad = crval2 * kDegToRad;
    wcs_.cell_rad = cdelt2 * kDegToRad;
    if (f.text("CTYPE3").value_or("") == "FREQ") {
      wcs_.freq_hz = f.number("CRVAL3").value_or(0);
      wcs_.bandwidth_hz = f.number("CDELT3").value_or(0);
    }
    wcs_.bunit = f.text("BUNIT").value_or("");
    wcs_.telescope = f.text("TELESCOP").value_or("");
    wcs_.date_obs = f.text("DATE-OBS").value_or("");
  }

  // Without `info` the image is known from the start.
  void start(Context& ctx) override { ctx.emit(image, read()); }

  void process(Context& ctx) override {
    check_centre(*ctx.in(info)->obs);
    ctx.emit(image, read());
  }

 private:
  void check_centre(const Observation& obs) const {
    // The angle between the two directions (haversine: accurate for small angles).
    const double dra = obs.ra_rad - wcs_.ra_rad, ddec = obs.dec_rad - wcs_.dec_rad;
    const double h = std::sin(ddec / 2) * std::sin(ddec / 2) +
                     std::cos(obs.dec_rad) * std::cos(wcs_.dec_rad) * std::sin(dra / 2) * std::sin(dra / 2);
    const double sep = 2 * std::asin(std::sqrt(std::min(1.0, h)));
    if (sep > kCentreTolPixels * wcs_.cell_rad)
      throw InputError(where_ + ": CRVAL1, CRVAL2 put the image's phase centre at RA " + num(wcs_.ra_rad * kRadToDeg) +
                       ", Dec " + num(wcs_.dec_rad * kRadToDeg) + " deg, " + num(sep * kRadToDeg * 3600, 6) +
                       " arcsec from the observation's (RA " + num(obs.ra_rad * kRadToDeg) + ", Dec " +
                       num(obs.dec_rad * kRadToDeg) + " deg, " + obs.origin +
                       "): a model must be centred on the phase centre it is predicted for");
  }

  std::shared_ptr<Image> read() const {
    fits::ImageFile f(path_, hdu_);
    auto img = std::make_shared<Image>();
    img->nx = img->ny = n_;
    img->pixels = Array<float>::host(std::size_t(n_) * std::size_t(n_));
    f.read_plane(0, img->pixels.data());
    for (std::size_t i = 0; i < img->pixels.size(); ++i)
      if (!std::isfinite(img->pixels[i]))
        throw InputError(where_ + ": pixel (" + std::to_string(i % std::size_t(n_) + 1) + ", " +
                         std::to_string(i / std::size_t(n_) + 1) + ") (FITS, 1-based) is " +
                         (std::isnan(img->pixels[i]) ? "undefined (NaN)" : "infinite") +
                         ": a model needs a finite value in every pixel");
    img->wcs = wcs_;
    return img;
  }

  std::string path_, where_;
  int hdu_ = 0, n_ = 0;
  SkyWcs wcs_;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<ReadImage>()}); }

}  // namespace uvflow::io_read_image
