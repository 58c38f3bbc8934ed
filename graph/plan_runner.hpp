// Running a plan's stages on oneTBB flow graphs. A plan without loops is one graph. A plan with
// loops runs in order: the stages before a loop (one graph), the loop's body once per cycle (a new
// graph each cycle, its stages made and prepared anew, so a stage needs nothing to run in a loop),
// the stages after it, and so on. What crosses from one graph to a later one (a loop's inputs, its
// state, what leaves it) is held between them as the payloads themselves, where they are: a
// device-resident value stays on the device from one cycle to the next.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/progress.hpp"
#include "graph/report.hpp"
#include "graph/run_state.hpp"
#include "graph/held.hpp"
#include "graph/stage_node.hpp"

namespace uvflow {

class PlanRunner {
 public:
  explicit PlanRunner(RunState& run) : run_(run), budget_(run.plan.run) {}
  // Runs every graph; a failure (a stage's, Ctrl-C, a setup error) is recorded in the RunState and
  // stops what is left.
  void run();
  // Each stage's metrics, summed over the graphs and cycles that ran it, in plan order.
  std::vector<StageMetrics> metrics() const;
  const std::vector<LoopReport>& loops() const { return loops_; }
  std::vector<HeldReport> held() const;
  double stream_start_s() const { return stream_start_s_; }
  // Draws the progress line from the graph now running (the monitor thread calls it).
  void progress(ProgressLine& line, double since_start);

 private:
  // Everything one output port of one stage produced, held from one graph to a later one: each
  // item in memory, where it was made, while the run's hold budget allows (a stream's items;
  // once items always), else in the output's scratch file.
  struct Held {
    Arity arity = Arity::once;
    std::vector<HeldItem> items;
  };
  using PortKey = std::pair<int, std::string>;  // stage index, output port

  // One flow graph over the stages `members` (plan indices). Their inputs from outside come from
  // held_; their outputs read outside it, and `also_keep`, are collected into held_. With `times`,
  // each member's time in this graph is appended there (a loop's per-cycle table).
  void run_graph(const std::vector<int>& members, const std::set<PortKey>& also_keep,
                 std::vector<CycleReport::StageTime>* times = nullptr);
  void run_loop(const LoopPlan& lp);
  void add_metrics(const StageMetrics& m);

  RunState& run_;
  const Plan& plan() const { return run_.plan; }
  HoldBudget budget_;  // before held_, whose items give their bytes back to it
  std::map<PortKey, Held> held_;
  std::vector<LoopReport> loops_;
  std::map<std::string, HeldReport> held_report_;  // by output, those that spilled
  std::map<std::string, StageMetrics> metrics_;  // by stage id
  double stream_start_s_ = -1;
  std::mutex nodes_m_;  // the running graph's nodes, for the progress line
  std::vector<std::unique_ptr<StageNode>> nodes_;
};

}  // namespace uvflow
