// The progress line on stderr while a plan runs (ExecOptions::progress, on a terminal only).
#pragma once

#include <memory>
#include <vector>

#include "graph/run_state.hpp"
#include "graph/stage_node.hpp"

namespace uvflow {

class ProgressLine {
 public:
  explicit ProgressLine(bool requested);  // draws nothing unless requested and stderr is a terminal
  // Redraws, at most twice a second: the items done of each source, and the items taken in by
  // every other stage still running.
  void update(double since_start, const std::vector<std::unique_ptr<StageNode>>& nodes);
  void clear();  // erases the line, if one was drawn

 private:
  bool draw_;
  bool drew_ = false;
  Clock::time_point last_draw_ = Clock::now();
};

}  // namespace uvflow
