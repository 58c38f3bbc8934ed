// example.vis_scale: the declaration's spec, the cpu backend and the plugin entry point; the cuda
// backend is in vis_scale.cu (this plugin is built only where CUDA is: examples/plugin/CMakeLists.txt).
#include "vis_scale.hpp"

#include "runtime/registry.hpp"

namespace vis_scale {

class VisScale : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(in_vis);
    auto out = std::make_shared<VisBlock>(*in);
    out->vis = Array<cfloat>::host(in->size());
    const float f = float(params().factor);
    for (std::size_t i = 0; i < in->size(); ++i) out->vis[i] = f * in->vis[i];
    ctx.add_work({.visibilities = double(in->size())});
    ctx.emit(out_vis, out);
  }
};

void register_stages(Registry& r) {
  // The first backend is the default; a pipeline picks the other with `backend: cuda`.
  r.add(decl.spec({cpu_backend<VisScale>(), {"cuda", make_cuda}}));
}

}  // namespace vis_scale

UVFLOW_PLUGIN("vis_scale", vis_scale::register_stages)
