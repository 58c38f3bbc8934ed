// Runs a Plan on a oneTBB flow graph and reports what each stage did.
#pragma once

#include <string>

#include "graph/interrupt.hpp"
#include "graph/pipeline.hpp"
#include "graph/report.hpp"

namespace uvflow {

struct ExecOptions {
  bool progress = false;  // draw a progress line on stderr
  std::string report;     // write the run report (JSON) here, committed with the outputs ("" = none)
};

// Throws ConfigError (environment cannot run the plan), StageError (a stage failed), OutputError
// (the outputs or the report cannot be written; nothing was committed) or Interrupted (a signal).
// Output files and the report are committed together, only when the whole run succeeds.
RunReport run_plan(const Plan& plan, const ExecOptions& opts = {});

// Builds and prepares every stage without running anything (what `uvflow check` does after
// validation). Throws ConfigError.
void dry_run_prepare(const Plan& plan);

}  // namespace uvflow
