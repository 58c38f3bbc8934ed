// image.zeros, cuda backend: the zeros made in device memory.
#include <cuda_runtime.h>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "stages/image/zeros.hpp"

namespace uvflow::image_zeros {
namespace {

class ZerosCuda : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(like);
    if (!in->consistent()) throw InputError("image.zeros: the image 'like' has inconsistent size");
    const device::Stream& stream = ctx.stream();
    auto out = std::make_shared<Image>(*in);
    out->pixels = Array<float>::device(in->pixels.size(), stream);
    device::check(cudaMemsetAsync(out->pixels.data(), 0, out->pixels.size() * sizeof(float),
                                  static_cast<cudaStream_t>(stream.native())),
                  "image.zeros (cuda)", "zero the image");
    if (out->wcs) {
      out->wcs->bunit = params().bunit;
      out->wcs->beam.reset();
    }
    ctx.emit(image, out);
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<ZerosCuda>(); }

}  // namespace uvflow::image_zeros
