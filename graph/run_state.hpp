// What the nodes of one run share: the plan, the clock, the first failure (which cancels the
// running graph), the device watcher and the output files.
#pragma once

#include <oneapi/tbb/flow_graph.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
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
  explicit RunState(const Plan& p) : plan(p) {}
  // The first failure is the one reported; it cancels the graph that is running.
  void fail(std::exception_ptr e) {
    bool expected = false;
    if (failed.compare_exchange_strong(expected, true)) {
      first_error = e;
      std::lock_guard lk(graph_m_);
      if (graph_) graph_->cancel();
    }
  }
  // The flow graph now running (a plan with loops runs several, one after another; graph/plan_runner),
  // or nullptr between them. A graph attached after a failure is cancelled at once.
  void attach(tbb::flow::graph* g) {
    std::lock_guard lk(graph_m_);
    graph_ = g;
    if (g && failed) g->cancel();
  }
  double since_start() const { return seconds_between(t0, Clock::now()); }

  const Plan& plan;
  Watcher* watcher = nullptr;  // the running graph's, in runs with cuda stages only
  // Runs with cuda stages: an event recorded (with timing) as the sources began streaming, at
  // device_origin_s on the run's clock, so that stages can place their device work on that clock.
  device::Event device_origin;
  double device_origin_s = -1;
  std::string device_name;
  OutputFiles files{"uvflow"};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  // Cleared when the running graph is over: device work completing later then releases nothing.
  std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  Clock::time_point t0 = Clock::now();

 private:
  std::mutex graph_m_;
  tbb::flow::graph* graph_ = nullptr;
};

}  // namespace uvflow
