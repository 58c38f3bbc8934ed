// A pipeline after loading, validation and planning: every stage resolved to a spec and backend,
// every parameter typed, every edge's residency known, the transfers the planner inserted listed.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/registry.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

struct RunOptions {
  int max_in_flight = 4;           // stream items alive at once, per source
  bool explicit_transfers = false; // refuse to insert host<->device copies
  std::string report;              // JSON run report path ("" = none)
  SourcePos report_pos;            // where it was set (the file, --set or --report)
  int threads = 0;                 // TBB worker threads (0 = all cores)
  bool once_first = false;         // finish what depends only on `once` outputs before streaming
  int pinned_pool_mb = 0;          // pinned host memory reserved before the stages prepare
  int device_pool_mb = 0;          // device memory mapped into the CUDA pool before the run
};

// One input port's connection.
struct InputLink {
  std::string port;
  int from = -1;          // index of the producing stage in Plan::stages
  std::string from_port;
  SourcePos pos;
};

// The resolved facts of one output port of one stage instance.
struct OutputInfo {
  std::string type;
  Arity arity = Arity::stream;
  Location location = Location::host;
  PortShape shape;  // what the producer's describe tells of its items before the run
};

struct StageInstance {
  std::string id;
  const StageSpec* spec = nullptr;
  std::string backend;
  ParamValues params;
  SourcePos pos;                             // the stage's entry in the file
  std::map<std::string, SourcePos> param_pos;
  std::vector<InputLink> inputs;
  std::map<std::string, OutputInfo> outputs;
  std::vector<std::string> pinned_outputs;   // host outputs that feed an upload
  bool inserted = false;                     // a transfer the planner added
};

struct Plan {
  std::filesystem::path file;
  std::string name, description;
  RunOptions run;
  std::vector<StageInstance> stages;  // in topological order
  std::vector<std::string> notes;     // what the planner did (transfers inserted)
};

// Loads, validates and plans a pipeline. `sets` are --set KEY=VALUE overrides. Every problem is
// collected and thrown together as one ConfigError; nothing is constructed when it throws.
// Plugins the pipeline names are looked for next to it and in `plugin_path`, never in the working
// directory; `load_plugins = false` skips them (their stage types are then unknown).
Plan load_plan(const std::filesystem::path& file, const std::vector<std::string>& sets,
               Registry& registry, const std::vector<std::filesystem::path>& plugin_path = {},
               bool load_plugins = true);

// What a stage's prepare() is told: its pinned outputs and the shapes of its inputs and outputs.
// `stream`: the stage's own (cuda backends in a run; none in a dry run).
PrepareContext prepare_context(const Plan& plan, const StageInstance& st, bool dry_run, device::Stream stream = {});

// Graphviz rendering: stages, ports, edge residency, inserted transfers highlighted.
std::string plan_to_dot(const Plan& p);
// Human-readable plan: order, edges with residency, transfers.
std::string plan_to_text(const Plan& p);

// Closest candidate within a small edit distance, or "" (for "did you mean").
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace uvflow
