// Text renderings of stage specs: `uvflow stages`, `uvflow describe`, and docs/stages.md.
#pragma once

#include <string>

#include "runtime/registry.hpp"

namespace uvflow {

std::string stages_summary(const Registry& r);
std::string describe_stage(const StageSpec& s);
std::string stages_markdown(const Registry& r);

}  // namespace uvflow
