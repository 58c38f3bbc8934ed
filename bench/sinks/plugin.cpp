// The bench_sinks plugin's entry point: registers every sink.
#include "sinks.hpp"

namespace {
void register_stages(uvflow::Registry& r) {
  uvflow::bench::register_drop_vis(r);
  uvflow::bench::register_drop_frames(r);
}
}  // namespace

UVFLOW_PLUGIN("bench_sinks", register_stages)
