// What a run did, stage by stage: the table `uvflow run` prints and the JSON of run.report.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/stage.hpp"

namespace uvflow {

struct StageMetrics {
  std::string id, type, backend;
  bool inserted = false;
  std::int64_t items_in = 0, items_out = 0;
  double wall_s = 0;     // host time inside process/finish
  double device_s = 0;   // device time between CUDA events around each call (cuda backends)
  double busy_from = -1, busy_to = 0;  // first start and last end, seconds since the run began
  double last_output_s = -1;          // when its last output was handed on (downloads: landed)
  // Cuda stages: when its first call's device work began and its last one's ended, on the device's
  // clock, placed on the run's clock by an event recorded as the sources began streaming (never
  // late, early by that record's latency); -1 if none. The device timeline that busy_from/busy_to
  // are on the host.
  double device_from = -1, device_to = -1;
  Work work;
  // Time that rates are computed from: device time for cuda stages, host time otherwise.
  double time_s() const { return backend == "cuda" && device_s > 0 ? device_s : wall_s; }
};

// One cycle of a loop (a `loop:` entry): its figures as the stage named by the loop's `figures:`
// reported them (all 0 without one), and the host time the cycle took.
struct CycleReport {
  std::int64_t cycle = 0;
  double peak_start = 0, peak = 0, noise = 0;  // Jy/beam: the residual's peak before and after, its noise
  double flux = 0, model_flux = 0;             // Jy: cleaned in the cycle, in the model after it
  std::int64_t iterations = 0, total_iterations = 0;
  std::string minor_stop;                      // why the minor cycle stopped
  double wall_s = 0;
  // Each body stage's time in this cycle (StageMetrics' wall_s and device_s), in plan order.
  struct StageTime {
    std::string id;
    double wall_s = 0, device_s = 0;
  };
  std::vector<StageTime> stages;
};

struct LoopReport {
  std::string id;
  std::vector<CycleReport> cycles;
  std::string stopped_by;  // max_cycles, threshold, threshold_sigma, max_minor_iterations, no_components
};

// An output held for a later graph (a loop's data; graph/held.hpp) that went past the run's hold
// budgets: how many of its device items were held in host memory, how many items went to its
// scratch file and their bytes, summed over the graphs that held it (a loop's stream state is held
// again every cycle).
struct HeldReport {
  std::string output;  // STAGE.PORT
  std::int64_t items = 0, items_on_host = 0, spilled_items = 0;
  double spilled_bytes = 0;
};

// A `choose:` entry of the plan: the option that ran, and for `choose: auto` why.
struct ChoiceReport {
  std::string id, chosen;
  bool automatic = false;
  std::string why;
};

struct RunReport {
  std::string pipeline, file, device;
  std::vector<ChoiceReport> choices;
  double wall_s = 0;  // the whole run, graph construction to the last stage
  double stream_start_s = 0;  // when the sources began streaming (after run.once_first's phase)
  std::vector<StageMetrics> stages;
  std::vector<std::string> outputs;  // files written
  std::vector<LoopReport> loops;     // per cycle, each loop's figures
  std::vector<HeldReport> held;      // outputs held in scratch files, in part
  // A run of several MPI ranks (runtime/dist.hpp): this process's rank, the seconds it spent in
  // collectives (waiting for the other ranks included), and on rank 0 every rank's report, in
  // rank order (its own first), each without outputs.
  int rank = 0;
  int local_rank = 0;  // its index among the ranks on its node: the GPU it takes (device::for_local_rank)
  double communication_s = 0;
  std::vector<RunReport> ranks;

  // The stage with this id; throws std::out_of_range naming it when the run had none.
  const StageMetrics& stage(std::string_view id) const;
};

std::string format_report(const RunReport& r);
std::string report_json(const RunReport& r);
// What report_json wrote, back (the per-rank reports travel to rank 0 as JSON).
RunReport report_from_json(const std::string& json);

}  // namespace uvflow
