#include "stages/deconv/clark.hpp"

namespace uvflow::deconv_clark {
namespace {

class Clark : public clean::MinorCycleStage<decl> {
 protected:
  clean::MinorCycle clean(float* residual, float* model, const Image& d, const Image& p,
                          const std::vector<std::uint8_t>& mask, const clean::Limits& limits,
                          const std::function<bool()>& cancelled) override {
    const Params& pr = params();
    return clean::clark(residual, model, d.nx, d.ny, p, mask, pr.gain, limits.niter, limits.threshold, int(pr.psf_patch),
                        pr.cycle_factor, decl.type, cancelled);
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<Clark>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::deconv_clark
