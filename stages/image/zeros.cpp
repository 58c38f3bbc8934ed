#include "stages/image/zeros.hpp"

#include <algorithm>

#include "runtime/error.hpp"

namespace uvflow::image_zeros {
namespace {

class Zeros : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(like);
    if (!in->consistent()) throw InputError("image.zeros: the image 'like' has inconsistent size");
    auto out = std::make_shared<Image>(*in);
    out->pixels = Array<float>::host(in->pixels.size());
    std::fill(out->pixels.begin(), out->pixels.end(), 0.0f);
    if (out->wcs) {
      out->wcs->bunit = params().bunit;
      out->wcs->beam.reset();
    }
    ctx.emit(image, out);
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<Zeros>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::image_zeros
