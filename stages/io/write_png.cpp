#include "stages/io/write_png.hpp"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <vector>

#include "runtime/error.hpp"
#include "stages/io/path_template.hpp"

namespace uvflow::io_write_png {
namespace {

void write_grey_png(const std::string& path, int w, int h, const std::vector<png_byte>& rows) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) throw std::runtime_error("cannot open " + path + " for writing");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) throw std::runtime_error("libpng: out of memory");
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw std::runtime_error("libpng failed writing " + path);
  }
  png_init_io(png, f.get());
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; ++y) png_write_row(png, const_cast<png_bytep>(rows.data() + std::size_t(y) * w));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
}

class WritePng : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    path_ = p.path.string();
    asinh_ = p.stretch == "asinh";
    lo_pct_ = p.low_percentile;
    hi_pct_ = p.high_percentile;
    soft_ = p.asinh_softening;
    if (lo_pct_ >= hi_pct_) throw ParamError("low_percentile", "must be below high_percentile");
  }

  void process(Context& ctx) override {
    auto img = ctx.in(image);
    require_index_for_streams(path_, ctx.item());
    const int w = img->nx, h = img->ny;
    const float* px = img->pixels.data();
    std::vector<float> sorted;
    sorted.reserve(img->pixels.size());
    for (std::size_t i = 0; i < img->pixels.size(); ++i)
      if (std::isfinite(px[i])) sorted.push_back(px[i]);
    if (sorted.empty()) throw InputError("image " + std::to_string(img->index) + " has no finite pixel");
    auto pct = [&](double p) {
      std::size_t k = std::min(sorted.size() - 1, std::size_t(p / 100.0 * double(sorted.size() - 1) + 0.5));
      std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(k), sorted.end());
      return double(sorted[k]);
    };
    const double lo = pct(lo_pct_), hi = std::max(pct(hi_pct_), lo + 1e-30);
    std::vector<png_byte> rows(std::size_t(w) * h);
    const double norm = asinh_ ? std::asinh(soft_) : 1.0;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        double v = px[std::size_t(y) * w + x];
        double t = std::isfinite(v) ? std::clamp((v - lo) / (hi - lo), 0.0, 1.0) : 0.0;
        if (asinh_) t = std::asinh(t * soft_) / norm;
        rows[std::size_t(h - 1 - y) * w + x] = png_byte(std::lround(t * 255.0));
      }
    write_grey_png(ctx.output_file(expand_index(path_, img->index)).string(), w, h, rows);
  }

 private:
  std::string path_;
  bool asinh_ = true;
  double lo_pct_ = 0.5, hi_pct_ = 99.99, soft_ = 20;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WritePng>()}); }

}  // namespace uvflow::io_write_png
