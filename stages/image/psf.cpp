#include "stages/image/psf.hpp"

#include <cmath>

#include "runtime/error.hpp"
#include "stages/shared/fits_image.hpp"

namespace uvflow::image_psf {

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

namespace {

class Psf : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    from_file_ = p.source == "file";
    if (from_file_ && !p.path) throw ParamError("path", "source: file needs a path to a FITS image");
    if (!from_file_ && p.path) throw ParamError("path", "is read only with source: file");
    if (from_file_) path_ = *p.path;
    nx_ = int(p.size_x);
    ny_ = int(p.size_y);
    sigma_ = p.core_sigma;
    wing_ = p.wing_amplitude;
    index_ = p.wing_index;
    normalise_ = p.normalise;
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
    validate(*psf_, where);
    if (normalise_) {
      double sum = 0;
      for (float v : psf_->pixels) sum += v;
      if (!(std::abs(sum) > 0)) throw InputError(where + ": PSF sums to zero and cannot be normalised to 1");
      for (float& v : psf_->pixels) v = float(v / sum);
    }
  }

  // The PSF is a `once` output known up front: emitted before any stream, and no items follow.
  void start(Context& ctx) override { ctx.emit(psf, psf_); }
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
  std::filesystem::path path_;
  int nx_ = 0, ny_ = 0;
  double sigma_ = 0, wing_ = 0, index_ = 0;
  std::shared_ptr<Image> psf_;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<Psf>()}); }

}  // namespace uvflow::image_psf
