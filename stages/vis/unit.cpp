#include "stages/vis/unit.hpp"

#include <algorithm>

#include "stages/shared/vis_checks.hpp"

namespace uvflow::vis_unit {
namespace {

class Unit : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(vis);
    check_arrays(*in);
    auto out = std::make_shared<VisBlock>(*in);  // shares every array but vis
    out->vis = Array<cfloat>::host(in->size());
    std::fill(out->vis.begin(), out->vis.end(), cfloat(1.0f, 0.0f));
    ctx.add_work({.visibilities = double(in->size())});
    ctx.emit(unit, out);
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<Unit>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::vis_unit
