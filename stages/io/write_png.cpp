#include "stages/io/write_png.hpp"

#include <fcntl.h>
#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "runtime/error.hpp"
#include "stages/io/path_template.hpp"

namespace uvflow::io_write_png {
namespace {

// libpng's errors longjmp here; the message is kept for the exception, not printed.
[[noreturn]] void on_png_error(png_structp png, png_const_charp msg) {
  *static_cast<std::string*>(png_get_error_ptr(png)) = msg;
  png_longjmp(png, 1);
}
void on_png_warning(png_structp, png_const_charp) {}

// Writes `path` (a temporary made for this file: created here, exclusively, never through a
// link); messages name `shown` (the user's path) and the system's cause.
void write_grey_png(const std::string& path, const std::string& shown, int w, int h, const std::vector<png_byte>& rows) {
  auto fail = [&](const std::string& why) { return std::runtime_error("cannot write " + shown + ": " + why); };
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) throw fail(std::strerror(errno));
  FILE* f = fdopen(fd, "wb");
  if (!f) {
    const int err = errno;
    close(fd);
    throw fail(std::strerror(err));
  }
  std::string message;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &message, on_png_error, on_png_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    std::fclose(f);
    throw fail("libpng: out of memory");
  }
  errno = 0;
  if (setjmp(png_jmpbuf(png))) {
    const int err = errno;  // a failed fwrite's (libpng says only "Write Error")
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    throw fail(err ? std::string(std::strerror(err)) + " (libpng: " + message + ")" : "libpng: " + message);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; ++y) png_write_row(png, const_cast<png_bytep>(rows.data() + std::size_t(y) * w));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  // The last buffered bytes reach the disk here: a full disk may show only now.
  if (std::fflush(f) != 0 || std::ferror(f)) {
    const int err = errno;
    std::fclose(f);
    throw fail(std::strerror(err));
  }
  if (std::fclose(f) != 0) throw fail(std::strerror(errno));
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
    const std::string final_path = expand_index(path_, img->index);
    write_grey_png(ctx.output_file(final_path).string(), final_path, w, h, rows);
  }

 private:
  std::string path_;
  bool asinh_ = true;
  double lo_pct_ = 0.5, hi_pct_ = 99.99, soft_ = 20;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WritePng>()}); }

}  // namespace uvflow::io_write_png
