// deconv.clark, cuda backend: clark_cuda (stages/shared/clean_cuda.cu) on the device images.
#include "stages/deconv/clark.hpp"
#include "stages/shared/minor_cycle_cuda.cuh"

namespace uvflow::deconv_clark {
namespace {

class ClarkCuda : public clean::MinorCycleCuda<decl> {
 protected:
  clean::MinorCycle clean(float* residual, float* model, const Image& d, const Image& p, double p0, const std::uint8_t* mask,
                          const clean::Limits& limits, const std::function<bool()>& cancelled,
                          const device::Stream& stream) override {
    const Params& pr = params();
    return clean::clark_cuda(residual, model, d.nx, d.ny, p.pixels.data(), p.nx, p.ny, p0, mask, pr.gain, limits.niter,
                             limits.threshold, int(pr.psf_patch), pr.cycle_factor, decl.type, cancelled, stream);
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<ClarkCuda>(); }

}  // namespace uvflow::deconv_clark
