// A pipeline after loading, validation and planning: every stage resolved to a spec and backend,
// every parameter typed, every edge's residency known, the transfers the planner inserted listed.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
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
  // Stream items held from one graph to a later one (the data a loop reads every cycle) stay in
  // memory up to these budgets (0: half the node's memory, half the device's, each shared by the
  // MPI job's ranks there); the rest go to a scratch file in scratch_dir ("": $TMPDIR, else /tmp).
  // graph/held.hpp.
  std::int64_t hold_memory_mb = 0;
  std::int64_t hold_device_mb = 0;
  std::string scratch_dir;
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

// What a stage is to a loop (a `loop:` entry; see LoopPlan). The loop's own parts are pseudo-stages
// in the plan, so that validation, residency and `uvflow plan` treat its edges like any other.
enum class LoopRole {
  none,     // outside every loop
  body,     // a stage of a loop's body: made anew and run once per cycle
  state,    // a loop-carried value (id: the state's name): `init` on the first cycle, `next` after
  control,  // the loop's CycleControl for the cycle (id LOOP.control)
  exit      // the values that leave the loop after its last cycle (id: the loop's)
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
  LoopRole role = LoopRole::none;
  std::string loop;                          // the loop's id, for every role but none
};

// A loop-carried value: the state pseudo-stage `name` reads `init` (outside the loop) before the first
// cycle; after each cycle it takes the value of `next` (a body stage's output).
struct LoopState {
  std::string name;
  std::string next, next_port;  // producer id and port
  SourcePos pos;
};

// The stop conditions of a loop; 0 turns an optional one off.
struct LoopStop {
  std::int64_t max_cycles = 0;             // the bound: at most this many cycles (required, >= 1)
  double threshold = 0;                    // Jy: stop once the peak residual the figures report is at most this
  double threshold_sigma = 0;              // ... at most this times the noise they report
  std::int64_t max_minor_iterations = 0;   // stop once the minor cycles have made this many components in all
  double major_gain = 1;                   // each cycle's minor iterations stop at (1 - major_gain) x their start peak
};

// A bounded loop over a sub-graph (docs/pipelines.md, "Loops"). Its body stages, state and control
// pseudo-stages (role body, state, control) and its exit are in Plan::stages like any other stage.
struct LoopPlan {
  std::string id;
  SourcePos pos;
  LoopStop stop;
  std::map<std::string, SourcePos> stop_pos;  // where each stop setting was written
  std::string figures, figures_port;          // the body output (CycleFigures) the stop conditions read; "" none
  std::vector<LoopState> state;
  std::vector<std::string> outputs;           // exit ports that are body outputs of the last cycle (not state)
};

// A choice (a `choose:` entry; docs/pipelines.md, "Choices"): only the chosen option's stages are in
// the plan, and readers of ID.NAME are linked to the stage output the option names for NAME.
struct ChoicePlan {
  std::string id;
  SourcePos pos;
  std::string chosen;
  std::vector<std::string> options;  // in the file's order
  std::map<std::string, std::vector<std::string>> option_stages;  // each option's stage ids
  // `choose: auto`: the option was picked by the stages' estimates (StageSpec::estimate), the
  // fastest whose predicted error is at most `accuracy` (0: any); `why` says what each would cost.
  bool automatic = false;
  double accuracy = 0;
  std::string why;
};

struct Plan {
  std::filesystem::path file;
  std::string name, description;
  RunOptions run;
  std::vector<StageInstance> stages;  // in topological order
  std::vector<std::string> notes;     // what the planner did (transfers inserted)
  std::vector<LoopPlan> loops;
  std::vector<ChoicePlan> choices;
  std::vector<std::shared_ptr<const StageSpec>> own_specs;  // the specs of loops' pseudo-stages
  // The index of the stage `id` in `stages`; -1 if none.
  int index_of(std::string_view id) const;
};

// Loads, validates and plans a pipeline. `sets` are --set KEY=VALUE overrides. Every problem is
// collected and thrown together as one ConfigError; nothing is constructed when it throws.
// Plugins the pipeline names are looked for next to it and in `plugin_path`, never in the working
// directory; `load_plugins = false` skips them (their stage types are then unknown). `estimate =
// false`: a `choose: auto` takes its first option that plans, without estimating any (no source's
// statistics pass), for a look at what a pipeline reads and writes.
Plan load_plan(const std::filesystem::path& file, const std::vector<std::string>& sets,
               Registry& registry, const std::vector<std::filesystem::path>& plugin_path = {},
               bool load_plugins = true, bool estimate = true);
// The same for a pipeline given as YAML text; `name` stands for its file in messages and plan.file
// (relative plugin paths are looked for next to it, as for a file of that name).
Plan load_plan_text(const std::string& text, const std::filesystem::path& name, const std::vector<std::string>& sets,
                    Registry& registry, const std::vector<std::filesystem::path>& plugin_path = {});

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
