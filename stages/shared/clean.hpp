// CLEAN's building blocks, shared by the deconv.* stages: cleaning masks, the Hogbom and Clark
// minor cycles and their stages' common work, the fit of an elliptical Gaussian to the PSF's main lobe and the restoring convolution.
// Images are [y][x], x fastest, the PSF centred on pixel (nx/2, ny/2) as the gridding chain makes it.
#pragma once

#include <algorithm>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/payloads/cycle.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/stage.hpp"

namespace uvflow::clean {

// A box of pixels, both corners included.
struct Box {
  std::int64_t x0, y0, x1, y1;
};

// Which pixels may hold components: 1 where the FITS mask `file` is non-zero (and not NaN) or a
// pixel lies in one of `boxes`; every pixel when neither is given. Throws InputError when the file
// is not nx x ny or a box leaves the image, naming the file or the box (1-based, as written).
std::vector<std::uint8_t> make_mask(int nx, int ny, const std::string& file, const std::vector<Box>& boxes);

// The boxes of a `boxes` records parameter (fields x0, y0, x1, y1); ParamError `param` when a box is
// empty (x1 < x0 or y1 < y0).
std::vector<Box> boxes_of(const std::vector<Record>& records, const std::string& param);

// The mask of a minor-cycle stage, made when its image's size is first known (prepare(), where the
// planner knows the dirty image's size, so a bad mask stops the run before it starts) and again if
// an image of another size arrives.
class MaskSource {
 public:
  MaskSource() = default;
  MaskSource(std::string file, std::vector<Box> boxes) : file_(std::move(file)), boxes_(std::move(boxes)) {}
  const std::vector<std::uint8_t>& get(int nx, int ny);
  // Neither a file nor boxes: every pixel (the cuda backends then need no mask at all).
  bool all() const { return file_.empty() && boxes_.empty(); }

 private:
  std::string file_;
  std::vector<Box> boxes_;
  std::vector<std::uint8_t> mask_;
  int nx_ = 0, ny_ = 0;
};

// One CLEAN component and the figures after its subtraction.
struct Component {
  int x, y;
  double flux;           // Jy, added to the model pixel
  double peak_residual;  // the peak |residual| it was found at (before subtracting it)
  double cleaned;        // total flux in the model after it
};

struct MinorCycle {
  std::vector<Component> components;
  double peak_residual = 0;  // the peak |residual| (within the mask) when it stopped
  std::string stop;          // "niter", "threshold" or "cancelled"
  std::string detail;        // where a backend's time went, for the debug log (uvflow run -v)
};

// `where`'s PSF centre value `centre` as a double; InputError (naming `where` and the pixel) unless
// it is positive and finite: components are scaled by it.
double require_positive_centre(float centre, const Image& psf, const std::string& where);

// Hogbom CLEAN on `residual` (the dirty image on entry; nx x ny) into `model` (added to): find the
// peak of |residual| within `mask`, add gain * peak / psf(centre) to the model there, subtract that
// times the PSF centred there (over the overlap of the PSF and the image), until `niter` components
// or the peak is at most `threshold`. Ties go to the first pixel in memory order, so the components
// are the same on every run. Throws InputError (naming `where`) unless the PSF's centre is positive.
MinorCycle hogbom(float* residual, float* model, int nx, int ny, const Image& psf, const std::vector<std::uint8_t>& mask,
                  double gain, std::int64_t niter, double threshold, const std::string& where,
                  const std::function<bool()>& cancelled);

// Clark CLEAN: image-plane cycles, each selecting the pixels whose |residual| exceeds cycle_factor
// times the largest PSF sidelobe outside a (2 psf_patch + 1)^2 patch times the peak (at most half
// the peak; at least threshold), running Hogbom on those pixels alone with the patch, then subtracting
// the cycle's components from the whole residual exactly, by FFT convolution with the whole PSF (over
// the same overlap as hogbom()).
// Stops like hogbom(); a component's peak_residual is the value the patch-based cycle found.
MinorCycle clark(float* residual, float* model, int nx, int ny, const Image& psf, const std::vector<std::uint8_t>& mask,
                 double gain, std::int64_t niter, double threshold, int psf_patch, double cycle_factor,
                 const std::string& where, const std::function<bool()>& cancelled);

// The PSF's (2 psf_patch + 1)^2 pixels around its centre, row by row, 0 beyond the PSF.
std::vector<float> psf_patch_of(const Image& psf, int psf_patch);

// The level above which a Clark cycle cleans, for a cycle starting at `peak`: cycle_factor x the
// largest exterior sidelobe x the peak (the sidelobes the patch leaves out add up over the cycle's
// components), at most half the peak so that every cycle has pixels to clean, at least threshold.
constexpr double clark_limit(double threshold, double cycle_factor, double sidelobe, double peak) {
  return std::max(threshold, std::min(0.5, cycle_factor * sidelobe) * peak);
}

// Whether a minor cycle (Hogbom before each component, Clark before each cycle) stops, the
// residual's peak |value| being `peak` (-1: an empty mask): at the threshold, after niter
// components, or when cancelled (out.peak_residual and out.stop are set).
inline bool minor_cycle_done(MinorCycle& out, float peak, double threshold, std::int64_t niter,
                       const std::function<bool()>& cancelled) {
  out.peak_residual = std::max(0.0f, peak);
  if (peak <= threshold) {
    out.stop = "threshold";
    return true;
  }
  if (std::int64_t(out.components.size()) >= niter) return true;
  if (cancelled && cancelled()) {
    out.stop = "cancelled";
    return true;
  }
  return false;
}

// One Clark cycle's patch Hogbom (clark()'s): on the pixels of
// `residual` (host, nx wide) within `mask` above `limit`, components appended to `out` (with the
// running total `cleaned`) until none is above `limit`, `out` holds `niter`, or `sidelobe` (the
// largest |PSF| / p0 outside the patch) times p0 times the cycle's summed |fluxes| passes a quarter
// of `limit` (beyond that the patch's values may drift from the true residual's and the cycle diverge);
// this cycle's components' pixels and fluxes, in order, in `at` and `fluxes`.
void clark_cycle(const float* residual, const std::vector<std::uint8_t>& mask, int nx, double limit, double sidelobe,
                 double gain, double p0, std::int64_t niter, const std::vector<float>& patch, int psf_patch, MinorCycle& out,
                 double& cleaned, std::vector<std::size_t>& at, std::vector<float>& fluxes);
// The same cycle on its pixels already selected: `active` (ascending pixel indices, nx wide) and their
// residual values `value` (changed), as deconv.clark's cuda backend selects them on the device.
// Each component costs the patch's selected pixels times log(active.size()) (a tournament tree).
void clark_patch_cycle(const std::vector<std::size_t>& active, std::vector<float>& value, int nx, double limit,
                       double sidelobe, double gain, double p0, std::int64_t niter, const std::vector<float>& patch,
                       int psf_patch, MinorCycle& out, double& cleaned, std::vector<std::size_t>& at,
                       std::vector<float>& fluxes);

// The robust RMS of `pixels` where `mask` is set: 1.4826 x the median absolute deviation from the
// median (the RMS of Gaussian noise, little moved by a few bright sources); 0 when none is set.
double robust_rms(const float* pixels, const std::vector<std::uint8_t>& mask);

// Where one call of a minor cycle stops: the largest of the stage's `threshold`, and with a loop's
// control, its absolute threshold, threshold_sigma x the noise and (1 - major_gain) x the starting
// peak; and after the fewest of the stage's `niter` and the loop's components left.
struct Limits {
  double threshold = 0;
  std::int64_t niter = 0;
  std::string threshold_by;  // which setting the threshold is: threshold, loop threshold, threshold_sigma, major_gain
};
Limits minor_cycle_limits(double threshold, std::int64_t niter, double peak_start, double noise, const CycleControl* control);

// What a minor-cycle stage does around its algorithm: the residual starts as a copy of `dirty`, the
// model (JY/PIXEL) as a copy of `start_model` (the model so far, of the dirty image's size) or at 0,
// both with the dirty image's sky coordinates; `run` cleans them within the Limits (from the stage's
// threshold and niter and a loop's `control`); the outcome is logged and, with `components_file`,
// each component written there (a line per iteration: index, x, y, flux, peak residual, flux
// cleaned); `figures` says what the call did. Nothing when the run was cancelled.
// The parts of run_minor_cycle() a backend with its images elsewhere (cuda) calls itself:
// InputError unless the dirty image and the model so far are consistent and of one size;
// the figures a cycle starts from (peak within the mask and noise of the dirty image's host pixels)
// and its Limits; the model's total flux (summed in pixel order); and, after the run, the figures
// completed, the outcome logged and the components written.
void check_cycle_inputs(const std::string& type, const Image& dirty, const Image* start_model);
Limits begin_minor_cycle(const float* dirty, const std::vector<std::uint8_t>& mask, double threshold, std::int64_t niter,
                         const CycleControl* control, CycleFigures& f);
double model_flux(const float* model, std::size_t n);
void end_minor_cycle(Context& ctx, const std::string& type, const Limits& limits, const MinorCycle& cycle, double flux_in_model,
                     const std::string& components_file, CycleFigures& f);
struct CleanedImages {
  std::shared_ptr<Image> model, residual;
  std::shared_ptr<CycleFigures> figures;
};
std::optional<CleanedImages> run_minor_cycle(
    Context& ctx, const std::string& type, const Image& dirty, const Image* start_model, const CycleControl* control,
    double threshold, std::int64_t niter, MaskSource& mask, const std::string& components_file,
    const std::function<MinorCycle(float* residual, float* model, const std::vector<std::uint8_t>& mask, const Limits&)>& run);

// exp(-(a x^2 + 2 b x y + c y^2)), x and y in pixels from the centre.
struct Gaussian {
  double a = 0, b = 0, c = 0;
};

// The least-squares fit of a peak-1 elliptical Gaussian centred on the PSF's centre to the PSF's
// main lobe: the pixels connected to the centre whose value is at least `threshold` times the
// centre's, and the 3 x 3 around it. Throws InputError (naming `where`) when the centre is not
// positive or the lobe is not an ellipse (too few pixels, a divergent fit).
Gaussian fit_main_lobe(const Image& psf, double threshold, const std::string& where);

// WSClean's restoring beam (its -fit-beam, with -beam-fitting-size box_beams): the least-squares fit
// of a peak-1 Gaussian centred on the PSF's centre to the pixels of the box of box_beams beams
// across (even) around the centre, of which WSClean's fitter counts only the quadrant at and above
// and right of the centre (x, y >= 0); started from fit_main_lobe(psf, threshold), which also sets
// the box. Throws like fit_main_lobe().
Gaussian fit_wsclean(const Image& psf, double threshold, double box_beams, const std::string& where);

// FWHM axes (degrees, for pixels of `cell_rad`) and position angle (degrees east of north, RA
// increasing to the left, in (-90, 90]) of `g`, and back.
Beam to_beam(const Gaussian& g, double cell_rad);
Gaussian from_beam(const Beam& b, double cell_rad);

// restored = model convolved with `g` (a component of S Jy becomes a Gaussian of peak S) + residual.
void restore(const float* model, const float* residual, float* restored, int nx, int ny, const Gaussian& g);

}  // namespace uvflow::clean
