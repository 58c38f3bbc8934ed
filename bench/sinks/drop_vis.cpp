// bench.drop_vis: consumes VisBlocks and keeps nothing, so that a pipeline io.read_ms ->
// bench.drop_vis times the reader alone (the framework still counts the visibilities).
#include "runtime/payloads/vis.hpp"
#include "sinks.hpp"

namespace uvflow::bench {
namespace {

class DropVis : public Stage {
 public:
  void process(Context& ctx) override {
    ctx.add_work({.visibilities = double(ctx.in<VisBlock>("vis")->size())});
  }
};

}  // namespace

void register_drop_vis(Registry& r) {
  StageSpec s;
  s.type = "bench.drop_vis";
  s.summary = "drop visibility blocks (a do-nothing consumer for benchmarks of sources)";
  s.doc = "Counts the visibilities of each block and releases it; in the bench_sinks plugin (bench/sinks).";
  s.inputs = {{"vis", "VisBlock", Arity::stream, Residency::host, "visibilities, dropped"}};
  s.backends = {{"cpu", [] { return std::make_unique<DropVis>(); }}};
  s.concurrency = Concurrency::parallel;
  r.add(std::move(s));
}

}  // namespace uvflow::bench
