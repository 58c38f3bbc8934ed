// An image of zeros shaped like another: the first value of an image a loop accumulates (the
// model of pipelines/clean_image.yaml's major cycles).
#pragma once

#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::image_zeros {

inline constexpr In<Image> like{
    .name = "like", .arity = Arity::once, .residency = Residency::backend, .doc = "the image whose size and sky coordinates it takes"};
inline constexpr Out<Image> image{.name = "image", .arity = Arity::once, .residency = Residency::backend, .doc = "zeros"};

struct Params {
  std::string bunit = "JY/PIXEL";
};

inline const StageDecl<Params> decl{
    .type = "image.zeros",
    .summary = "an image of zeros with the size and sky coordinates of another",
    .doc = "Emits an image of `like`'s size and sky coordinates (no restoring beam) whose pixels are all 0, in "
           "units `bunit`: the initial value of a loop's model (pipelines/clean_image.yaml; with the cuda backend, "
           "made in device memory, clean_image_gpu.yaml). Tested in tests/loop_test.cpp and tests/gpu_deconv_test.cpp.",
    .inputs = {like},
    .outputs = {image},
    .params = {{&Params::bunit, {.name = "bunit", .doc = "the FITS BUNIT of the image"}}},
    .describe = [](const Params&, const PortShapes& in) {
      auto it = in.find(like.name);
      return it == in.end() ? PortShapes{} : PortShapes{{std::string(image.name), PortShape{.nx = it->second.nx, .ny = it->second.ny}}};
    },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // zeros.cu
#endif

}  // namespace uvflow::image_zeros
