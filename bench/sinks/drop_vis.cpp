// bench.drop_vis: consumes VisBlocks and keeps nothing, so that a pipeline io.read_ms ->
// bench.drop_vis times the reader alone (the framework still counts the visibilities).
#include "runtime/payloads/vis.hpp"
#include "runtime/registry.hpp"

namespace {

using namespace uvflow;

class DropVis : public Stage {
 public:
  void process(Context& ctx) override {
    ctx.add_work({.visibilities = double(ctx.in<VisBlock>("vis")->size())});
  }
};

void register_stages(Registry& r) {
  StageSpec s;
  s.type = "bench.drop_vis";
  s.summary = "drop visibility blocks (a do-nothing consumer for benchmarks of sources)";
  s.doc = "Counts the visibilities of each block and releases it; built by bench/read_ms.sh.";
  s.inputs = {{"vis", "VisBlock", Arity::stream, Residency::host, "visibilities, dropped"}};
  s.backends = {{"cpu", [] { return std::make_unique<DropVis>(); }}};
  s.concurrency = Concurrency::parallel;
  r.add(std::move(s));
}

}  // namespace

UVFLOW_PLUGIN("bench_drop_vis", register_stages)
