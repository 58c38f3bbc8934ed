// The operator of Listing 3.6 was lost when the report was turned into text; it is taken to be a
// product (see the stage doc for why). A gain vector whose length differs from a frame's width is
// an InputError naming the frame and the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::image_column_gain {

inline constexpr In<Image> in_frame{.name = "frame", .doc = "frames to correct"};
inline constexpr Out<Image> out_frame{.name = "frame", .doc = "corrected frames, same size and index"};

struct Params {
  std::string source = "flat";
  std::optional<std::filesystem::path> path;
  double gain = 1.0;
  double slope = 0.0;
};

inline const StageDecl<Params> decl{
    .type = "image.column_gain",
    .summary = "multiply every column of a frame by its gain (StrayLight Listing 3.6)",
    .doc = "out[y][x] = in[y][x] * gain[x]: the per-column correction the StrayLight report applies to each frame "
           "before the PSF convolution (Listing 3.6, correction_direct_peak). The listing's operator was lost when "
           "the report was converted to text. It is read as a product: it stood alone on its own line, as did the "
           "'*' that the same conversion dropped from Listing 4.9 (line 33, between the image and kernel texture "
           "fetches), and a per-column factor applied to a detector frame is a gain (flat field). The conversion "
           "also dropped some '-' (Listing 4.2 line 16), so the text alone cannot exclude an offset; a correction "
           "that divides is this stage with reciprocal gains. Gains come from a FITS file "
           "(1-D, or a 1 x W image) or from a flat or linear model; a gain vector whose length differs from the "
           "frame width is an input error naming the frame and the file. The cuda backend applies the same float "
           "products to device-resident frames (the gains uploaded once per frame width) and is tested against the "
           "cpu backend.",
    .inputs = {in_frame},
    .outputs = {out_frame},
    .params = {{&Params::source,
                {.name = "source", .choices = {"file", "flat", "linear"}, .doc = "where the gains come from"}},
               {&Params::path, {.name = "path", .doc = "source file: FITS gains, 1-D or 1 x W", .role = PathRole::input}},
               {&Params::gain,
                {.name = "gain",
                 .min = -1e30,
                 .max = 1e30,
                 .doc = "flat: every column's gain; linear: the gain at the centre column"}},
               {&Params::slope,
                {.name = "slope",
                 .unit = "1/pixel",
                 .min = -1e30,
                 .max = 1e30,
                 .doc = "linear: gain[x] = gain + slope * (x - (W - 1) / 2)"}}},
    .concurrency = Concurrency::parallel,
    .describe = [](const Params&, const PortShapes& in) {
      auto it = in.find(in_frame.name);
      return it == in.end() ? PortShapes{} : PortShapes{{std::string(out_frame.name), it->second}};
    },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/image/column_gain.cu
#endif

// Where the gains come from, shared by the backends so that they accept the same parameters and
// files and reject the same frames.
// Throws InputError unless the frame's pixels are nx * ny of a non-empty frame.
void check_frame(const Image& frame);

class Gains {
 public:
  void configure(const Params& p);  // throws ParamError
  void load();                    // source file: reads and checks it (InputError)
  // The gain of each column of frame `index`, `nx` pixels wide. Thread-safe.
  std::vector<float> of_frame(int nx, std::int64_t index) const;

 private:
  std::string source_, where_;
  std::filesystem::path path_;
  double gain_ = 1, slope_ = 0;
  std::vector<float> file_gains_;
};

}  // namespace uvflow::image_column_gain
