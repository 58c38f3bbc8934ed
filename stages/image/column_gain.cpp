#include "stages/image/column_gain.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/shared/fits_image.hpp"

namespace uvflow::image_column_gain {

namespace {
std::string shape(const std::vector<long>& ax) {
  std::string s;
  for (long n : ax) s += (s.empty() ? "" : " x ") + std::to_string(n);
  return s;
}
}  // namespace

void Gains::configure(const Params& p) {
  source_ = p.source;
  if (source_ == "file" && !p.path) throw ParamError("path", "source: file needs a FITS file of gains");
  if (source_ != "file" && p.path) throw ParamError("path", "is read only with source: file");
  if (source_ == "flat" && p.slope != 0) throw ParamError("slope", "is used only with source: linear");
  if (p.path) path_ = *p.path;
  gain_ = p.gain;
  slope_ = p.slope;
}

void Gains::load() {
  if (source_ != "file") return;
  fits::ImageFile f(path_, 0);
  where_ = f.where();
  const auto& ax = f.axes();
  if (!(ax.size() == 1 || (ax.size() == 2 && ax[1] == 1)) || ax[0] <= 0)
    throw InputError(where_ + ": expected a 1-D array or a 1 x W image of gains, found " + shape(ax));
  file_gains_.resize(ax[0]);
  f.read_plane(0, file_gains_.data());
  for (std::size_t x = 0; x < file_gains_.size(); ++x)
    if (!std::isfinite(file_gains_[x]))
      throw InputError(where_ + ": the gain of column " + std::to_string(x) + " is not a finite number");
}

void check_frame(const Image& frame) {
  if (!frame.consistent())
    throw InputError("frame " + std::to_string(frame.index) + " has " + std::to_string(frame.pixels.size()) +
                     " pixels, not nx * ny = " + std::to_string(frame.nx) + " x " + std::to_string(frame.ny));
}

std::vector<float> Gains::of_frame(int nx, std::int64_t index) const {
  if (source_ == "file") {
    if (std::size_t(nx) != file_gains_.size())
      throw InputError("frame " + std::to_string(index) + " is " + std::to_string(nx) + " pixels wide but " + where_ +
                       " holds " + std::to_string(file_gains_.size()) + " column gains");
    return file_gains_;
  }
  std::vector<float> g(nx);
  for (int x = 0; x < nx; ++x) g[x] = float(gain_ + slope_ * (x - 0.5 * (nx - 1)));
  return g;
}

namespace {

class ColumnGain : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { gains_.configure(p); }

  void prepare(PrepareContext& pc) override {
    pinned_ = pc.pinned(out_frame.name);
    gains_.load();
  }

  void process(Context& ctx) override {
    auto in = ctx.in(in_frame);
    check_frame(*in);
    const int nx = in->nx;
    const std::vector<float> gains = gains_.of_frame(nx, in->index);
    const float* g = gains.data();
    auto out = std::make_shared<Image>(*in);
    out->pixels = Array<float>::host(in->pixels.size(), pinned_);
    const float* src = in->pixels.data();
    float* dst = out->pixels.data();
    tbb::parallel_for(tbb::blocked_range<int>(0, in->ny, 64), [&](const tbb::blocked_range<int>& r) {
      for (int y = r.begin(); y < r.end(); ++y) {
        const float* a = src + std::size_t(y) * nx;
        float* b = dst + std::size_t(y) * nx;
        for (int x = 0; x < nx; ++x) b[x] = a[x] * g[x];
      }
    });
    ctx.emit(out_frame, out);
  }

 private:
  Gains gains_;
  bool pinned_ = false;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<ColumnGain>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::image_column_gain
