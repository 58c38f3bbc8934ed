// What can be known about a plan without computing anything, checked by `uvflow check` and at the
// start of `uvflow run`, so that a run does not fail after its work is done:
// - inputs (path parameters declared PathRole::input) exist and can be read; an input that another
//   pipeline in the same folder writes is named with that pipeline;
// - outputs: their folders exist or can be created, and are writable; no two writers (nor the run
//   report) write the same file; a per-item output (PathRole::output_per_item) has {index} when
//   more than one item reaches it;
// - every stage prepares in a dry run (files opened, nothing read or allocated);
// - a cuda backend has a device to run on;
// - something writes the result.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "graph/pipeline.hpp"

namespace uvflow {

enum class PreflightFor {
  check,  // `uvflow check`: what only stops a run here (no GPU, an input another pipeline makes) is a warning
  run     // `uvflow run`: every problem is an error; dry-run prepare only to learn stream lengths
};

struct PreflightResult {
  std::vector<Diagnostic> errors;
  std::vector<Diagnostic> warnings;  // printed as "file:line:col: warning: ..."
};

// `registry` and `plugin_path` load the other pipelines of the folder, for naming the one that
// makes a missing input (their plugins are not loaded).
PreflightResult preflight(const Plan& plan, PreflightFor mode, Registry& registry,
                          const std::vector<std::filesystem::path>& plugin_path = {});

// One stage built, configured and prepared in a dry run; its stream length if it is a source
// (0 when unknown without reading its data). Throws what the stage throws.
std::int64_t prepare_dry(const Plan& plan, const StageInstance& st);

// Cuda stages with no device to run on (no GPU, or a build without CUDA), one per stage.
std::vector<Diagnostic> device_problems(const Plan& plan);

std::string warning_str(const Diagnostic& d);

}  // namespace uvflow
