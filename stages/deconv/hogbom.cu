// deconv.hogbom, cuda backend: hogbom_cuda (stages/shared/clean_cuda.cu) on the device images.
#include "stages/deconv/hogbom.hpp"
#include "stages/shared/minor_cycle_cuda.cuh"

namespace uvflow::deconv_hogbom {
namespace {

class HogbomCuda : public clean::MinorCycleCuda<decl> {
 protected:
  clean::MinorCycle clean(float* residual, float* model, const Image& d, const Image& p, double p0, const std::uint8_t* mask,
                          const clean::Limits& limits, const std::function<bool()>& cancelled,
                          const device::Stream& stream) override {
    return clean::hogbom_cuda(residual, model, d.nx, d.ny, p.pixels.data(), p.nx, p.ny, p0, mask, params().gain, limits.niter,
                              limits.threshold, cancelled, stream);
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<HogbomCuda>(); }

}  // namespace uvflow::deconv_hogbom
