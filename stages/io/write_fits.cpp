#include "stages/io/write_fits.hpp"

#include <fitsio.h>

#include <cmath>
#include <cstdio>

#include "runtime/payloads/image.hpp"
#include "runtime/units.hpp"
#include "stages/io/path_template.hpp"
#include "stages/io/read_fits.hpp"

namespace uvflow {
namespace {

class Fits {
 public:
  explicit Fits(const std::string& path) : path_(path) {
    int status = 0;
    // "!" makes cfitsio replace the (temporary) file if it exists.
    fits_create_file(&f_, ("!" + path).c_str(), &status);
    check(status, "create");
  }
  ~Fits() {
    int status = 0;
    if (f_) fits_close_file(f_, &status);
  }
  void close() {
    int status = 0;
    fits_close_file(f_, &status);
    f_ = nullptr;
    check(status, "close");
  }
  void check(int status, const char* what) const {
    if (!status) return;
    throw std::runtime_error(std::string("FITS ") + what + " " + path_ + ": " + fits::cfitsio_text(status));
  }
  void key(const char* k, double v, const char* comment) {
    int status = 0;
    fits_update_key(f_, TDOUBLE, k, &v, comment, &status);
    check(status, k);
  }
  void key(const char* k, const std::string& v, const char* comment) {
    int status = 0;
    fits_update_key(f_, TSTRING, k, const_cast<char*>(v.c_str()), comment, &status);
    check(status, k);
  }
  fitsfile* f_ = nullptr;
  std::string path_;
};

class WriteFits : public Stage {
 public:
  void configure(const Params& p) override {
    path_ = p.string("path");
    bitpix_ = int(p.integer("bitpix"));
    if (bitpix_ != -32 && bitpix_ != -64) throw ParamError("bitpix", "must be -32 or -64");
    if (path_.empty()) throw ParamError("path", "must not be empty");
  }

  void process(Context& ctx) override {
    auto img = ctx.in<Image>("image");
    require_index_for_streams(path_, ctx.item());
    if (!img->consistent())
      throw std::runtime_error("image " + std::to_string(img->index) + " has inconsistent size");
    const std::string final_path = expand_index(path_, img->index);
    const std::string tmp = ctx.output_file(final_path).string();
    Fits f(tmp);
    int status = 0;
    const bool sky = img->wcs.has_value();
    long naxes[4] = {img->nx, img->ny, 1, 1};
    fits_create_img(f.f_, bitpix_, sky ? 4 : 2, naxes, &status);
    f.check(status, "create image");
    if (sky) write_sky_header(f, *img);
    f.key("ORIGIN", std::string("uvflow"), "software that wrote this file");
    long first[4] = {1, 1, 1, 1};
    // cfitsio converts float to the file's BITPIX.
    fits_write_pix(f.f_, TFLOAT, first, long(img->pixels.size()), img->pixels.data(), &status);
    f.check(status, "write pixels");
    f.close();
  }

 private:
  static void write_sky_header(Fits& f, const Image& img) {
    const SkyWcs& w = *img.wcs;
    f.key("BUNIT", w.bunit, "units of the pixel values");
    f.key("BSCALE", 1.0, "");
    f.key("BZERO", 0.0, "");
    f.key("EQUINOX", 2000.0, "J2000");
    f.key("RADESYS", std::string("FK5"), "");
    f.key("CTYPE1", std::string("RA---SIN"), "");
    f.key("CRPIX1", double(img.nx / 2 + 1), "phase centre pixel");
    f.key("CRVAL1", std::fmod(w.ra_rad * kRadToDeg + 360.0, 360.0), "right ascension, deg");
    f.key("CDELT1", -w.cell_rad * kRadToDeg, "RA increases to the left");
    f.key("CUNIT1", std::string("deg"), "");
    f.key("CTYPE2", std::string("DEC--SIN"), "");
    f.key("CRPIX2", double(img.ny / 2 + 1), "phase centre pixel");
    f.key("CRVAL2", w.dec_rad * kRadToDeg, "declination, deg");
    f.key("CDELT2", w.cell_rad * kRadToDeg, "");
    f.key("CUNIT2", std::string("deg"), "");
    f.key("CTYPE3", std::string("FREQ"), "");
    f.key("CRPIX3", 1.0, "");
    f.key("CRVAL3", w.freq_hz, "reference frequency, Hz");
    f.key("CDELT3", w.bandwidth_hz > 0 ? w.bandwidth_hz : 1.0, "bandwidth, Hz");
    f.key("CUNIT3", std::string("Hz"), "");
    f.key("CTYPE4", std::string("STOKES"), "");
    f.key("CRPIX4", 1.0, "");
    f.key("CRVAL4", 1.0, "Stokes I");
    f.key("CDELT4", 1.0, "");
    f.key("CUNIT4", std::string(""), "");
    f.key("OBSRA", std::fmod(w.ra_rad * kRadToDeg + 360.0, 360.0), "phase centre RA, deg");
    f.key("OBSDEC", w.dec_rad * kRadToDeg, "phase centre Dec, deg");
    if (!w.telescope.empty()) f.key("TELESCOP", w.telescope, "");
    if (!w.date_obs.empty()) f.key("DATE-OBS", w.date_obs, "");
  }

  std::string path_;
  int bitpix_ = -32;
};

}  // namespace

StageSpec write_fits_spec() {
  StageSpec s;
  s.type = "io.write_fits";
  s.summary = "write images to FITS files with a WSClean-style celestial header";
  s.doc =
      "Dirty images are written with 4 axes (RA---SIN, DEC--SIN, FREQ, STOKES), the phase centre at "
      "pixel N/2+1, CDELT1 < 0 so RA increases to the left, BUNIT JY/BEAM: DS9, CARTA and WSClean users "
      "see the same orientation as WSClean's own images. Images without sky coordinates (frames) are plain "
      "2-D arrays. Files are written under a temporary name and appear only when the whole run succeeds.";
  s.inputs = {{"image", "Image", Arity::stream, Residency::host, "the image(s) to write"}};
  s.params = {
      {"path", ParamType::path, {}, false, "", {}, {}, {}, {},
       "output file; {index} is replaced by the item index (00000, 00001, ...) and is required for streams"},
      {"bitpix", ParamType::integer, std::int64_t(-32), false, "", -64, -32, {}, {},
       "-32 for float32 pixels, -64 for float64"}};
  s.backends = {{"cpu", [] { return std::make_unique<WriteFits>(); }}};
  s.concurrency = Concurrency::parallel;
  return s;
}

}  // namespace uvflow
