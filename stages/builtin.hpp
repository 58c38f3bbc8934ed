// The built-in stages, for the programs on top of the layers (the `uvflow` command, the tests):
// runtime/ holds the Registry but knows no stage, so this declaration lives with the stages.
#pragma once

#include "runtime/registry.hpp"

namespace uvflow {

// Adds every built-in stage (stages/builtin.cpp).
void register_builtin_stages(Registry& r);

}  // namespace uvflow
