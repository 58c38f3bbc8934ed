// What the nodes of one run share: the plan, the clock, the first failure (which cancels the
// graph), the device watcher and the output files.
#pragma once

#include <oneapi/tbb/flow_graph.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "graph/pipeline.hpp"
#include "graph/watcher.hpp"
#include "runtime/output_files.hpp"

namespace uvflow {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct RunState {
  RunState(const Plan& p, tbb::flow::graph& g) : plan(p), graph(g) {}
  // The first failure is the one reported; it cancels the graph.
  void fail(std::exception_ptr e) {
    bool expected = false;
    if (failed.compare_exchange_strong(expected, true)) {
      first_error = e;
      graph.cancel();
    }
  }
  double since_start() const { return seconds_between(t0, Clock::now()); }

  const Plan& plan;
  tbb::flow::graph& graph;
  Watcher* watcher = nullptr;  // runs with cuda stages only
  std::string device_name;
  OutputFiles files{"uvflow"};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  // Cleared when the run is over: device work completing later then releases nothing.
  std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  Clock::time_point t0 = Clock::now();
};

}  // namespace uvflow
