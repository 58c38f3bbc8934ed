#include "stages/shared/sky_header.hpp"

#include <cmath>

#include "runtime/units.hpp"

namespace uvflow::fits {

std::vector<Card> sky_header(const Image& img) {
  if (!img.wcs) return {};
  const SkyWcs& w = *img.wcs;
  const double ra_deg = std::fmod(w.ra_rad * kRadToDeg + 360.0, 360.0), dec_deg = w.dec_rad * kRadToDeg;
  std::vector<Card> c = {
      {"BUNIT", w.bunit, "units of the pixel values"},
      {"BSCALE", 1.0, ""},
      {"BZERO", 0.0, ""},
      {"EQUINOX", 2000.0, "J2000"},
      {"RADESYS", std::string("FK5"), ""},
      {"CTYPE1", std::string("RA---SIN"), ""},
      {"CRPIX1", double(img.nx / 2 + 1), "phase centre pixel"},
      {"CRVAL1", ra_deg, "right ascension, deg"},
      {"CDELT1", -w.cell_rad * kRadToDeg, "RA increases to the left"},
      {"CUNIT1", std::string("deg"), ""},
      {"CTYPE2", std::string("DEC--SIN"), ""},
      {"CRPIX2", double(img.ny / 2 + 1), "phase centre pixel"},
      {"CRVAL2", dec_deg, "declination, deg"},
      {"CDELT2", w.cell_rad * kRadToDeg, ""},
      {"CUNIT2", std::string("deg"), ""},
      {"CTYPE3", std::string("FREQ"), ""},
      {"CRPIX3", 1.0, ""},
      {"CRVAL3", w.freq_hz, "reference frequency, Hz"},
      {"CDELT3", w.bandwidth_hz > 0 ? w.bandwidth_hz : 1.0, "bandwidth, Hz"},
      {"CUNIT3", std::string("Hz"), ""},
      {"CTYPE4", std::string("STOKES"), ""},
      {"CRPIX4", 1.0, ""},
      {"CRVAL4", 1.0, "Stokes I"},
      {"CDELT4", 1.0, ""},
      {"CUNIT4", std::string(""), ""},
      {"OBSRA", ra_deg, "phase centre RA, deg"},
      {"OBSDEC", dec_deg, "phase centre Dec, deg"},
  };
  if (!w.telescope.empty()) c.push_back({"TELESCOP", w.telescope, ""});
  if (!w.date_obs.empty()) c.push_back({"DATE-OBS", w.date_obs, ""});
  if (w.beam) {
    c.push_back({"BMAJ", w.beam->bmaj_deg, "restoring beam major axis FWHM, deg"});
    c.push_back({"BMIN", w.beam->bmin_deg, "restoring beam minor axis FWHM, deg"});
    c.push_back({"BPA", w.beam->bpa_deg, "restoring beam position angle, deg east of north"});
  }
  return c;
}

}  // namespace uvflow::fits
