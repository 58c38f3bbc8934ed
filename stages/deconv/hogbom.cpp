#include "stages/deconv/hogbom.hpp"

namespace uvflow::deconv_hogbom {
namespace {

class Hogbom : public clean::MinorCycleStage<decl> {
 protected:
  clean::MinorCycle clean(float* residual, float* model, const Image& d, const Image& p,
                          const std::vector<std::uint8_t>& mask, const clean::Limits& limits,
                          const std::function<bool()>& cancelled) override {
    const Params& pr = params();
    return clean::hogbom(residual, model, d.nx, d.ny, p, mask, pr.gain, limits.niter, limits.threshold, decl.type, cancelled);
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<Hogbom>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::deconv_hogbom
