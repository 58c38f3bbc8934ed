// example.amplitude_clip: a filter (one stream in, one stream out), the worked example of
// docs/plugins.md. Flags visibilities whose amplitude exceeds a limit (radio-frequency
// interference shows up as such outliers) by setting their weight to zero; everything else passes
// through unchanged.
#include <cmath>

#include "runtime/payloads/vis.hpp"
#include "runtime/registry.hpp"
#include "runtime/stage_decl.hpp"

namespace amplitude_clip {

using namespace uvflow;

// The declaration: ports (typed by their payload), the parameter struct with its defaults, and
// the spec made from them. `uvflow describe example.amplitude_clip` prints exactly this.
inline constexpr In<VisBlock> in_vis{.name = "vis", .residency = Residency::host, .doc = "visibilities"};
inline constexpr Out<VisBlock> out_vis{
    .name = "vis", .residency = Residency::host, .doc = "the same visibilities, outliers weighted 0"};

struct Params {
  double max_jy = 100;
};

inline const StageDecl<Params> decl{
    .type = "example.amplitude_clip",
    .summary = "zero the weight of visibilities brighter than max_jy (an example plugin)",
    .doc = "Built out of tree from examples/plugin and loaded with `plugins:` in a pipeline file. A visibility "
           "whose amplitude exceeds max_jy, or is not a number, gets weight 0; the others keep theirs.",
    .inputs = {in_vis},
    .outputs = {out_vis},
    .params = {{&Params::max_jy, {.name = "max_jy", .unit = "Jy", .min = 0, .doc = "amplitude limit"}}},
    // Blocks are independent: the executor may clip several at once.
    .concurrency = Concurrency::parallel,
};

class AmplitudeClip : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(in_vis);  // std::shared_ptr<const VisBlock>
    // Payloads are shared and immutable: copy the block (arrays are shared, not copied) and
    // give it a new weight array.
    auto out = std::make_shared<VisBlock>(*in);
    out->weight = Array<float>::host(in->size());
    const double max_jy = params().max_jy;  // checked against the declared range already
    for (std::size_t i = 0; i < in->size(); ++i) {
      const bool bad = !(std::abs(in->vis[i]) <= max_jy);  // NaN is bad too
      out->weight[i] = bad ? 0.0f : in->weight[i];
    }
    ctx.add_work({.visibilities = double(in->size())});
    ctx.emit(out_vis, out);
  }
};

void register_stages(Registry& r) { r.add(decl.spec({cpu_backend<AmplitudeClip>()})); }

}  // namespace amplitude_clip

UVFLOW_PLUGIN("amplitude_clip", amplitude_clip::register_stages)
