#include "stages/io/write_fits.hpp"

#include <string>
#include <variant>

#include "runtime/error.hpp"
#include "stages/io/path_template.hpp"
#include "stages/shared/fits_image.hpp"
#include "stages/shared/sky_header.hpp"

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
    for (const auto& c : fits::sky_header(*img))
      std::visit([&](const auto& v) { f.key(c.key.c_str(), v, c.comment.c_str()); }, c.value);
    f.key("ORIGIN", std::string("uvflow"), "software that wrote this file");
    // cfitsio converts float to the file's BITPIX.
    f.write_pixels(img->pixels.data(), img->pixels.size());
    f.close();
  }

 private:
  std::string path_;
  int bitpix_ = -32;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WriteFits>()}); }

}  // namespace uvflow::io_write_fits
