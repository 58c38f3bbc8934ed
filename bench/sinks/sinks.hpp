// The benchmark sinks of bench/sinks, one registration function per stage.
#pragma once

#include "runtime/registry.hpp"

namespace uvflow::bench {
void register_drop_vis(Registry& r);
void register_drop_frames(Registry& r);
}  // namespace uvflow::bench
