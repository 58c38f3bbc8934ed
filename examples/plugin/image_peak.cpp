// example.image_peak: a sink (inputs, no outputs). Finds each image's brightest pixel and writes
// one line per image, "index x y value", to a text file when the run ends. The file goes through
// ctx.output_file(): it appears only if the whole run succeeds, so a failed or interrupted run
// leaves no half-written result.
#include <cmath>
#include <fstream>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/registry.hpp"
#include "runtime/stage_decl.hpp"

namespace image_peak {

using namespace uvflow;

inline constexpr In<Image> image{.name = "image", .residency = Residency::host, .doc = "images or frames"};

struct Params {
  std::filesystem::path path;
};

inline const StageDecl<Params> decl{
    .type = "example.image_peak",
    .summary = "write each image's brightest pixel to a text file (an example sink plugin)",
    .doc = "One line per image, in stream order: index, x, y (pixels, 0-based, row 0 at the bottom) and the "
           "value. NaN pixels are ignored.",
    .inputs = {image},
    .params = {{&Params::path,
                {.name = "path", .doc = "the text file to write", .required = true, .role = PathRole::output}}},
    // serial (the default): items arrive one at a time, in stream order.
};

class ImagePeak : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto img = ctx.in(image);
    if (!img->consistent())
      throw InputError("example.image_peak: image " + std::to_string(img->index) + " is empty or inconsistent");
    const float* px = img->pixels.host_data();
    std::size_t best = 0;
    for (std::size_t i = 1; i < img->pixels.size(); ++i)
      if (px[i] > px[best] || std::isnan(px[best])) best = i;
    lines_.push_back(std::to_string(img->index) + " " + std::to_string(best % img->nx) + " " +
                     std::to_string(best / img->nx) + " " + std::to_string(px[best]));
  }

  void finish(Context& ctx) override {
    std::ofstream f(ctx.output_file(params().path));
    for (const auto& l : lines_) f << l << "\n";
    if (!f) throw std::runtime_error("example.image_peak: cannot write " + params().path.string());
  }

 private:
  std::vector<std::string> lines_;
};

void register_stages(Registry& r) { r.add(decl.spec({cpu_backend<ImagePeak>()})); }

}  // namespace image_peak

UVFLOW_PLUGIN("image_peak", image_peak::register_stages)
