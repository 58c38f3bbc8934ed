// One stage of a running plan on the flow graph: a function_node (serial or unlimited, as its spec
// says) fed by one lightweight receiver per input port; each output port is a broadcast_node.
// Stream inputs are joined by item index, once-inputs are latched, serial stages see their items
// in stream order, and an end-of-stream marker carrying the item count lets a stage call finish()
// exactly once. A source sits behind a limiter_node and gives each item a token (graph/tokens).
#pragma once

#include <oneapi/tbb/flow_graph.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/device_order.hpp"
#include "graph/report.hpp"
#include "graph/run_state.hpp"
#include "graph/tokens.hpp"
#include "runtime/stage_context.hpp"

namespace uvflow {

// What travels on an edge: an item, or the end of a stream.
struct Msg {
  Tokens tokens;  // before the payload: members die in reverse, so the payload is freed before its permit
  std::shared_ptr<const Payload> payload;
  std::int64_t index = 0;
  bool end = false;        // end of stream: `count` items were sent before it
  std::int64_t count = 0;
};

// One call of a stage: an item with its joined stream inputs, start() or finish().
struct Invocation {
  bool finish = false;
  bool start = false;  // a source's start(): its up-front once outputs
  bool tick = false;   // a source's item: holds a permit of its limiter while anything made from it lives
  std::int64_t index = 0;
  Tokens tokens;  // before the inputs, as in Msg: the payloads are freed before their permits
  PayloadMap inputs;
};

class StageNode {
 public:
  // Configures and prepares the stage (throws what they throw).
  StageNode(RunState& run, const StageInstance& inst, std::unique_ptr<Stage> stage);
  void build(tbb::flow::graph& g);
  // `source(link)`: the node of the output that link reads.
  using OutputOf = std::function<tbb::flow::broadcast_node<Msg>&(const InputLink&)>;
  void connect_inputs(const OutputOf& source);
  void start_source();  // a source's start(): emits its up-front once outputs
  void activate();      // starts the streams
  StageMetrics metrics() const;
  const StageInstance& inst() const { return inst_; }
  bool finished() const { return finished_; }
  std::string waiting_for() const;
  std::int64_t progress_done() const { return completed_; }
  std::int64_t progress_total() const { return source_length_; }
  bool is_source() const { return inst_.inputs.empty(); }
  void sync_device() const {
    if (state_.stream.valid()) state_.stream.synchronize();
  }
  // After the last device work: fold the device-side work counters into the metrics.
  void collect_device_work() { state_.work.fold_device(state_.stream); }

  std::map<std::string, tbb::flow::broadcast_node<Msg>*, std::less<>> out;

 private:
  void deliver(const std::string& port, const Msg& m);
  void dispatch_locked(Invocation inv);
  void collect_locked();
  void run(const Invocation& inv);
  void forward(const std::string& port, std::shared_ptr<const Payload> p, const Tokens& tokens,
               std::int64_t index);
  void note_output();  // an output was handed on (for cuda host outputs: once the copy landed)

  RunState& run_;
  const StageInstance& inst_;
  std::unique_ptr<Stage> stage_;
  bool serial_;
  bool cuda_;
  StageState state_;  // what the stage's Context serves: its stream, work counters, output files
  std::vector<std::string> stream_ports_, once_ports_;
  std::int64_t source_length_ = 0;

  std::unique_ptr<tbb::flow::function_node<Invocation>> body_;
  std::unique_ptr<tbb::flow::input_node<Invocation>> source_;
  std::unique_ptr<tbb::flow::limiter_node<Invocation>> limiter_;
  std::vector<std::unique_ptr<tbb::flow::function_node<Msg, tbb::flow::continue_msg, tbb::flow::lightweight>>>
      receivers_;
  std::vector<std::unique_ptr<tbb::flow::broadcast_node<Msg>>> out_nodes_;
  std::int64_t next_tick_ = 0;
  tbb::flow::graph* graph_ = nullptr;

  mutable std::mutex m_;
  PayloadMap once_;
  std::map<std::int64_t, std::map<std::string, Msg, std::less<>>> pending_;
  std::map<std::string, std::int64_t, std::less<>> received_, end_count_;
  std::int64_t next_index_ = 0;        // serial stages: the next item to release
  std::int64_t dispatched_ = 0, completed_ = 0;
  bool finish_dispatched_ = false;
  std::atomic<bool> finished_{false};
  std::map<std::string, std::int64_t, std::less<>> emitted_;

  mutable std::mutex metrics_m_;
  StageMetrics metrics_;  // all but work (state_.work) and device time
  DeviceTimes device_times_;
};

}  // namespace uvflow
