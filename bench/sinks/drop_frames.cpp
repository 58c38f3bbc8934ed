// bench.drop_frames: consumes host frames and keeps nothing. Its input is on the host, so a cuda
// stage feeding it gets a download inserted: a pipeline ending in it times the frames' way back
// over the bus without the cost of writing them (bench/straylight_gpu.yaml).
#include "runtime/payloads/image.hpp"
#include "sinks.hpp"

namespace uvflow::bench {
namespace {

class DropFrames : public Stage {
 public:
  void process(Context& ctx) override { ctx.in<Image>("frame"); }
};

}  // namespace

void register_drop_frames(Registry& r) {
  StageSpec s;
  s.type = "bench.drop_frames";
  s.summary = "drop frames (a do-nothing host consumer for benchmarks)";
  s.doc = "Takes each frame on the host and releases it; in the bench_sinks plugin (bench/sinks).";
  s.inputs = {{"frame", "Image", Arity::stream, Residency::host, "frames, dropped"}};
  s.backends = {{"cpu", [] { return std::make_unique<DropFrames>(); }}};
  s.concurrency = Concurrency::parallel;
  r.add(std::move(s));
}

}  // namespace uvflow::bench
