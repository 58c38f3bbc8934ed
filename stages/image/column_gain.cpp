#include "stages/image/column_gain.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/io/read_fits.hpp"

namespace uvflow {
namespace column_gain {

namespace {
std::string shape(const std::vector<long>& ax) {
  std::string s;
  for (long n : ax) s += (s.empty() ? "" : " x ") + std::to_string(n);
  return s;
}
}  // namespace

void Gains::configure(const Params& p) {
  source_ = p.string("source");
  if (source_ == "file" && !p.has("path")) throw ParamError("path", "source: file needs a FITS file of gains");
  if (source_ != "file" && p.has("path")) throw ParamError("path", "is read only with source: file");
  if (source_ == "flat" && p.number("slope") != 0) throw ParamError("slope", "is used only with source: linear");
  if (p.has("path")) path_ = p.string("path");
  gain_ = p.number("gain");
  slope_ = p.number("slope");
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

}  // namespace column_gain

namespace {

class ColumnGain : public Stage {
 public:
  void configure(const Params& p) override { gains_.configure(p); }

  void prepare(PrepareContext& pc) override {
    pinned_ = pc.pinned("frame");
    gains_.load();
  }

  void process(Context& ctx) override {
    auto in = ctx.in<Image>("frame");
    column_gain::check_frame(*in);
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
    ctx.emit("frame", out);
  }

 private:
  column_gain::Gains gains_;
  bool pinned_ = false;
};

}  // namespace

StageSpec column_gain_spec() {
  StageSpec s;
  s.type = "image.column_gain";
  s.summary = "multiply every column of a frame by its gain (StrayLight Listing 3.6)";
  s.doc =
      "out[y][x] = in[y][x] * gain[x]: the per-column correction the StrayLight report applies to each frame "
      "before the PSF convolution (Listing 3.6, correction_direct_peak). The listing's operator was lost when "
      "the report was converted to text. It is read as a product: it stood alone on its own line, as did the "
      "'*' that the same conversion dropped from Listing 4.9 (line 33, between the image and kernel texture "
      "fetches), and a per-column factor applied to a detector frame is a gain (flat field). The conversion "
      "also dropped some '-' (Listing 4.2 line 16), so the text alone cannot exclude an offset; a correction "
      "that divides is this stage with reciprocal gains. Gains come from a FITS file "
      "(1-D, or a 1 x W image) or from a flat or linear model; a gain vector whose length differs from the "
      "frame width is an input error naming the frame and the file. The cuda backend applies the same float "
      "products to device-resident frames (the gains uploaded once per frame width) and is tested against the "
      "cpu backend.";
  s.inputs = {{"frame", "Image", Arity::stream, Residency::backend, "frames to correct"}};
  s.outputs = {{"frame", "Image", Arity::stream, Residency::backend, "corrected frames, same size and index"}};
  s.params = {
      {"source", ParamType::choice, std::string("flat"), false, "", {}, {}, {"file", "flat", "linear"}, {},
       "where the gains come from"},
      {"path", ParamType::path, {}, true, "", {}, {}, {}, {}, "source file: FITS gains, 1-D or 1 x W"},
      {"gain", ParamType::number, 1.0, false, "", -1e30, 1e30, {}, {},
       "flat: every column's gain; linear: the gain at the centre column"},
      {"slope", ParamType::number, 0.0, false, "1/pixel", -1e30, 1e30, {}, {},
       "linear: gain[x] = gain + slope * (x - (W - 1) / 2)"}};
  s.backends = {{"cpu", [] { return std::make_unique<ColumnGain>(); }}};
  s.backends.push_back(UVFLOW_CUDA_BACKEND(make_column_gain_cuda));
  s.concurrency = Concurrency::parallel;
  return s;
}

}  // namespace uvflow
