#include "stages/image/psf.hpp"

#include <cmath>

#include "runtime/error.hpp"
#include "stages/io/read_fits.hpp"

namespace uvflow {
namespace psf {

void validate(const Image& psf, const std::string& where) {
  if (!psf.consistent())
    throw InputError(where + ": PSF has no pixels (" + std::to_string(psf.nx) + " x " + std::to_string(psf.ny) + ")");
  bool nonzero = false;
  for (std::size_t i = 0; i < psf.pixels.size(); ++i) {
    const float v = psf.pixels[i];
    if (!std::isfinite(v))
      throw InputError(where + ": PSF pixel (x " + std::to_string(i % psf.nx) + ", y " + std::to_string(i / psf.nx) +
                       ") is " + (std::isnan(v) ? "NaN" : "infinite"));
    nonzero |= v != 0;
  }
  if (!nonzero) throw InputError(where + ": PSF is all zero");
}

}  // namespace psf

namespace {

class Psf : public Stage {
 public:
  void configure(const Params& p) override {
    from_file_ = p.string("source") == "file";
    if (from_file_ && !p.has("path")) throw ParamError("path", "source: file needs a path to a FITS image");
    if (!from_file_ && p.has("path")) throw ParamError("path", "is read only with source: file");
    if (from_file_) path_ = p.string("path");
    nx_ = int(p.integer("size_x"));
    ny_ = int(p.integer("size_y"));
    sigma_ = p.number("core_sigma");
    wing_ = p.number("wing_amplitude");
    index_ = p.number("wing_index");
    normalise_ = p.boolean("normalise");
  }

  void prepare(PrepareContext&) override {
    psf_ = std::make_shared<Image>();
    std::string where = "PSF model";
    if (from_file_) {
      fits::ImageFile f(path_, 0);
      f.require_planes();
      where = f.where();
      psf_->nx = int(f.nx());
      psf_->ny = int(f.ny());
      psf_->pixels = Array<float>::host(std::size_t(psf_->nx) * psf_->ny);
      f.read_plane(0, psf_->pixels.data());
    } else {
      model();
    }
    psf::validate(*psf_, where);
    if (normalise_) {
      double sum = 0;
      for (float v : psf_->pixels) sum += v;
      if (!(std::abs(sum) > 0)) throw InputError(where + ": PSF sums to zero and cannot be normalised to 1");
      for (float& v : psf_->pixels) v = float(v / sum);
    }
  }

  // The PSF is a `once` output known up front: emitted before any stream, and no items follow.
  void start(Context& ctx) override { ctx.emit("psf", psf_); }
  void process(Context&) override {}

 private:
  void model() {
    psf_->nx = nx_;
    psf_->ny = ny_;
    psf_->pixels = Array<float>::host(std::size_t(nx_) * ny_);
    const double s2 = sigma_ * sigma_;
    for (int y = 0; y < ny_; ++y)
      for (int x = 0; x < nx_; ++x) {
        const double dx = x - nx_ / 2, dy = y - ny_ / 2, r2 = dx * dx + dy * dy;
        psf_->pixels[std::size_t(y) * nx_ + x] =
            float(std::exp(-0.5 * r2 / s2) + wing_ * std::pow(1 + r2 / s2, -0.5 * index_));
      }
  }

  bool from_file_ = false, normalise_ = true;
  std::string path_;
  int nx_ = 0, ny_ = 0;
  double sigma_ = 0, wing_ = 0, index_ = 0;
  std::shared_ptr<Image> psf_;
};

}  // namespace

StageSpec psf_spec() {
  StageSpec s;
  s.type = "image.psf";
  s.summary = "the stray-light PSF, read from a FITS image or made from a Gaussian-core, power-law-wing model";
  s.doc =
      "Made once per run and handed to image.psf_convolve. source: file reads a FITS image (2-D, or the "
      "first plane of a cube; the primary array, or the first extension when the primary is empty). "
      "source: model evaluates exp(-r^2 / (2 core_sigma^2)) + wing_amplitude * (1 + r^2 / core_sigma^2)^"
      "(-wing_index/2) on size_x x size_y pixels, r measured from pixel (size_x/2, size_y/2): the pixel "
      "that image.psf_convolve maps onto itself. The PSF is checked before the run starts (and by `uvflow "
      "check`): a NaN or infinite pixel, or a PSF that is all zero, is an input error naming the file and "
      "HDU. With normalise it is scaled to sum 1, so convolving preserves the total flux of a frame.";
  s.outputs = {{"psf", "Image", Arity::once, Residency::host, "the PSF"}};
  s.params = {
      {"source", ParamType::choice, std::string("model"), false, "", {}, {}, {"file", "model"}, {},
       "file: read `path`; model: the parametric PSF below"},
      {"path", ParamType::path, {}, true, "", {}, {}, {}, {}, "source file: a FITS image"},
      {"size_x", ParamType::integer, std::int64_t(63), false, "pixels", 1, 65536, {}, {}, "model: width"},
      {"size_y", ParamType::integer, std::int64_t(63), false, "pixels", 1, 65536, {}, {}, "model: height"},
      {"core_sigma", ParamType::number, 1.5, false, "pixels", 1e-3, 1e5, {}, {},
       "model: standard deviation of the Gaussian core"},
      {"wing_amplitude", ParamType::number, 1e-3, false, "", 0, 1e6, {}, {},
       "model: value of the wings at the centre, relative to the core peak"},
      {"wing_index", ParamType::number, 3.0, false, "", 0, 100, {}, {},
       "model: power-law exponent n; far from the core the wings fall as r^-n"},
      {"normalise", ParamType::boolean, true, false, "", {}, {}, {}, {}, "scale the PSF to sum 1"}};
  s.backends = {{"cpu", [] { return std::make_unique<Psf>(); }}};
  return s;
}

}  // namespace uvflow
