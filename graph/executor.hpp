// Runs a Plan on a oneTBB flow graph and reports what each stage did.
#pragma once

#include "graph/interrupt.hpp"
#include "graph/pipeline.hpp"
#include "graph/report.hpp"

namespace uvflow {

struct ExecOptions {
  bool progress = false;  // draw a progress line on stderr
};

// Throws ConfigError (environment cannot run the plan), StageError (a stage failed) or
// Interrupted (Ctrl-C). Output files are committed only when the whole run succeeds.
RunReport run_plan(const Plan& plan, const ExecOptions& opts = {});

// Builds and prepares every stage without running anything (what `uvflow check` does after
// validation). Throws ConfigError.
void dry_run_prepare(const Plan& plan);

}  // namespace uvflow
