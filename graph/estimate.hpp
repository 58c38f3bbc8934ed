// The estimate pass behind `choose: auto` (docs/pipelines.md, "Choices"): every stage's
// StageSpec::estimate in plan order, each told its inputs' shapes with what the producers'
// estimates learned (the observation's statistics, a kernel stack's facts).
#pragma once

#include <string>
#include <vector>

#include "graph/pipeline.hpp"

namespace uvflow {

struct StageCost {
  std::string id;
  bool estimated = false;  // false: the stage has no estimate (its cost is not counted)
  Estimate est;
};

// One entry per stage of `plan`, in its order. A stage's estimate that throws is rethrown as an
// InputError naming the stage.
std::vector<StageCost> estimate_stages(const Plan& plan);

}  // namespace uvflow
