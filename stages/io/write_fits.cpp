#include "stages/io/write_fits.hpp"

#include <cmath>
#include <string>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/io/path_template.hpp"
#include "stages/shared/fits_image.hpp"

namespace uvflow::io_write_fits {
namespace {

class WriteFits : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    path_ = p.path.string();
    bitpix_ = int(p.bitpix);
    if (bitpix_ != -32 && bitpix_ != -64) throw ParamError("bitpix", "must be -32 or -64");
    if (path_.empty()) throw ParamError("path", "must not be empty");
  }

  void process(Context& ctx) override {
    auto img = ctx.in(image);
    require_index_for_streams(path_, ctx.item());
    if (!img->consistent())
      throw InputError("image " + std::to_string(img->index) + " has inconsistent size");
    const std::string final_path = expand_index(path_, img->index);
    const std::string tmp = ctx.output_file(final_path).string();
    fits::OutputFile f(tmp, final_path);
    const bool sky = img->wcs.has_value();
    if (sky)
      f.create_image(bitpix_, {img->nx, img->ny, 1, 1});
    else
      f.create_image(bitpix_, {img->nx, img->ny});
    if (sky) write_sky_header(f, *img);
    f.key("ORIGIN", std::string("uvflow"), "software that wrote this file");
    // cfitsio converts float to the file's BITPIX.
    f.write_pixels(img->pixels.data(), img->pixels.size());
    f.close();
  }

 private:
  static void write_sky_header(fits::OutputFile& f, const Image& img) {
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
    if (w.beam) {
      f.key("BMAJ", w.beam->bmaj_deg, "restoring beam major axis FWHM, deg");
      f.key("BMIN", w.beam->bmin_deg, "restoring beam minor axis FWHM, deg");
      f.key("BPA", w.beam->bpa_deg, "restoring beam position angle, deg east of north");
    }
  }

  std::string path_;
  int bitpix_ = -32;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WriteFits>()}); }

}  // namespace uvflow::io_write_fits
