// example.amplitude_clip: a worked example of a uvflow plugin (docs/plugins.md walks through it).
//
// Flags visibilities whose amplitude exceeds a limit (radio-frequency interference shows up as
// such outliers) by setting their weight to zero; everything else passes through unchanged.
//
//   in   vis      VisBlock, stream, host
//   out  vis      VisBlock, stream, host (same block, new weight array)
//   params
//     max_jy      amplitude limit in Jy (default 100)
#include <cmath>

#include "runtime/payloads/vis.hpp"
#include "runtime/registry.hpp"

namespace {

using namespace uvflow;

class AmplitudeClip : public Stage {
 public:
  void configure(const Params& p) override { max_jy_ = p.number("max_jy"); }

  void process(Context& ctx) override {
    auto in = ctx.in<VisBlock>("vis");
    // Payloads are shared and immutable: copy the block (arrays are shared, not copied) and
    // give it a new weight array.
    auto out = std::make_shared<VisBlock>(*in);
    out->weight = Array<float>::host(in->size());
    for (std::size_t i = 0; i < in->size(); ++i) {
      const bool bad = !(std::abs(in->vis[i]) <= max_jy_);  // NaN is bad too
      out->weight[i] = bad ? 0.0f : in->weight[i];
    }
    ctx.add_work({double(in->size())});
    ctx.emit("vis", out);
  }

 private:
  double max_jy_ = 100;
};

void register_stages(Registry& r) {
  StageSpec s;
  s.type = "example.amplitude_clip";
  s.summary = "zero the weight of visibilities brighter than max_jy (an example plugin)";
  s.doc = "Built out of tree from examples/plugin and loaded with `plugins:` in a pipeline file.";
  s.inputs = {{"vis", "VisBlock", Arity::stream, Residency::host, "visibilities"}};
  s.outputs = {{"vis", "VisBlock", Arity::stream, Residency::host, "the same visibilities, outliers weighted 0"}};
  s.params = {{"max_jy", ParamType::number, 100.0, false, "Jy", 0, {}, {}, {}, "amplitude limit"}};
  s.backends = {{"cpu", [] { return std::make_unique<AmplitudeClip>(); }}};
  s.concurrency = Concurrency::parallel;
  r.add(std::move(s));
}

}  // namespace

UVFLOW_PLUGIN("amplitude_clip", register_stages)
