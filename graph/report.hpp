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
  Work work;
  // Time that rates are computed from: device time for cuda stages, host time otherwise.
  double time_s() const { return backend == "cuda" && device_s > 0 ? device_s : wall_s; }
};

struct RunReport {
  std::string pipeline, file, device;
  double wall_s = 0;  // the whole run, graph construction to the last stage
  double stream_start_s = 0;  // when the sources began streaming (after run.once_first's phase)
  std::vector<StageMetrics> stages;
  std::vector<std::string> outputs;  // files written

  // The stage with this id; throws std::out_of_range naming it when the run had none.
  const StageMetrics& stage(std::string_view id) const;
};

std::string format_report(const RunReport& r);
std::string report_json(const RunReport& r);

}  // namespace uvflow
