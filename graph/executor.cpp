// Mapping a Plan onto a oneTBB flow graph.
//
// Each stage becomes a function_node (serial or unlimited, as its spec says) fed by one
// lightweight receiver per input port; each output port is a broadcast_node. Stream inputs are
// joined by item index, once-inputs are latched, serial stages see their items in stream order,
// and an end-of-stream marker carrying the item count lets a stage call finish() exactly once.
//
// Bounded execution: every source sits behind a limiter_node (run.max_in_flight). Each source
// item carries a token; everything derived from it holds the token, and the limiter is released
// when the last holder is gone and any device work on it has completed.
//
// Device work: a cuda stage enqueues on its own stream and returns. Its outputs carry the event of
// that work (consumers' streams wait on it); host outputs (downloads) are forwarded, and host
// inputs released, by a watcher thread once the event completes, so TBB workers never block on the
// GPU.
//
// Failure: the first exception cancels the graph and is reported once; Ctrl-C takes the same path;
// output files are committed only after a successful run.
#include "graph/executor.hpp"

#include "runtime/pinned_pool.hpp"

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <iomanip>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace uvflow {
namespace flow = tbb::flow;

namespace {

std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) { g_interrupt.store(true); }

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Waits on device events on its own thread, then runs a continuation.
class Watcher {
 public:
  explicit Watcher(flow::graph& g) : g_(g) {}
  ~Watcher() { stop(); }
  void start() { thread_ = std::thread([this] { loop(); }); }
  // Called from graph tasks: keeps wait_for_all() from returning until `fn` has run.
  void after(std::vector<device::Event> evs, std::function<void()> fn) {
    g_.reserve_wait();
    {
      std::lock_guard lk(m_);
      q_.push_back({std::move(evs), std::move(fn)});
    }
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  std::function<void(std::exception_ptr)> on_error;

 private:
  struct Job {
    std::vector<device::Event> evs;
    std::function<void()> fn;
  };
  void loop() {
    for (;;) {
      Job j;
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        j = std::move(q_.front());
        q_.pop_front();
      }
      try {
        for (auto& e : j.evs) e.synchronize();
        j.fn();
      } catch (...) {
        if (on_error) on_error(std::current_exception());
      }
      j = {};  // drop what the job kept alive before releasing the graph
      g_.release_wait();
    }
  }
  flow::graph& g_;
  std::thread thread_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> q_;
  bool stop_ = false;
};

// One source item's permit to be in flight.
class Token {
 public:
  Token(std::function<void()> release, Watcher* w, std::shared_ptr<std::atomic<bool>> alive)
      : release_(std::move(release)), watcher_(w), alive_(std::move(alive)) {}
  ~Token() {
    if (!alive_->load()) return;  // the run is over: nothing to release
    if (pending_.empty() || !watcher_) release_();
    else watcher_->after(std::move(pending_), std::move(release_));
  }
  void add_pending(device::Event e) {
    std::lock_guard lk(m_);
    pending_.push_back(std::move(e));
  }

 private:
  std::function<void()> release_;
  Watcher* watcher_;
  std::shared_ptr<std::atomic<bool>> alive_;
  std::mutex m_;
  std::vector<device::Event> pending_;
};
using Tokens = std::vector<std::shared_ptr<Token>>;

struct Msg {
  std::shared_ptr<const Payload> payload;
  Tokens tokens;
  std::int64_t index = 0;
  bool end = false;        // end of stream: `count` items were sent before it
  std::int64_t count = 0;
};

struct Invocation {
  bool finish = false;
  bool start = false;  // a source's start(): its up-front once outputs
  std::int64_t index = 0;
  std::map<std::string, std::shared_ptr<const Payload>, std::less<>> inputs;
  Tokens tokens;
};

long long item_of(const Invocation& inv) { return inv.finish || inv.start ? -1 : inv.index; }

class Executor;

class StageNode {
 public:
  StageNode(Executor& ex, const StageInstance& inst, std::unique_ptr<Stage> stage);
  void build(flow::graph& g);
  void connect_inputs(std::vector<std::unique_ptr<StageNode>>& nodes);
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
    if (stream_.valid()) stream_.synchronize();
  }
  // After the last device work: fold the device-side work counters into the metrics.
  void collect_device_work() {
    std::lock_guard lk(metrics_m_);
    if (device_work_.empty()) return;
    const Work d = read_device_work(device_work_, stream_);
    metrics_.work.visibilities += d.visibilities;
    metrics_.work.updates += d.updates;
    device_work_.clear();
  }

  std::map<std::string, flow::broadcast_node<Msg>*, std::less<>> out;

 private:
  friend class RunContext;
  void deliver(const std::string& port, const Msg& m);
  void dispatch_locked(Invocation inv);
  void collect_locked();
  void run(const Invocation& inv);
  void forward(const std::string& port, std::shared_ptr<const Payload> p, const Tokens& tokens,
               std::int64_t index);
  void note_output();  // an output was handed on (for cuda host outputs: once the copy landed)
  void stamp_device(const Invocation& inv, const std::vector<std::pair<std::string, std::shared_ptr<Payload>>>& outbox,
                    Tokens& tokens);

  Executor& ex_;
  const StageInstance& inst_;
  std::unique_ptr<Stage> stage_;
  bool serial_;
  bool cuda_;
  device::Stream stream_;
  std::vector<std::string> stream_ports_, once_ports_;
  std::int64_t source_length_ = 0;

  std::unique_ptr<flow::function_node<Invocation>> body_;
  std::unique_ptr<flow::input_node<Invocation>> source_;
  std::unique_ptr<flow::limiter_node<Invocation>> limiter_;
  std::vector<std::unique_ptr<flow::function_node<Msg, flow::continue_msg, flow::lightweight>>> receivers_;
  std::vector<std::unique_ptr<flow::broadcast_node<Msg>>> out_nodes_;
  std::int64_t next_tick_ = 0;
  flow::graph* graph_ = nullptr;

  mutable std::mutex m_;
  std::map<std::string, std::shared_ptr<const Payload>, std::less<>> once_;
  std::map<std::int64_t, std::map<std::string, Msg, std::less<>>> pending_;
  std::map<std::string, std::int64_t, std::less<>> received_, end_count_;
  std::int64_t next_index_ = 0;        // serial stages: the next item to release
  std::int64_t dispatched_ = 0, completed_ = 0;
  bool finish_dispatched_ = false;
  std::atomic<bool> finished_{false};
  std::map<std::string, std::int64_t, std::less<>> emitted_;

  // metrics
  mutable std::mutex metrics_m_;
  StageMetrics metrics_;
  std::vector<std::pair<device::Event, device::Event>> timing_events_;
  std::vector<Array<double>> device_work_;  // [visibilities, updates], read after the run
};

class Executor {
 public:
  Executor(const Plan& plan, const ExecOptions& opts) : plan_(plan), opts_(opts), watcher_(g_) {}
  RunReport run();

  void fail(std::exception_ptr e) {
    bool expected = false;
    if (failed_.compare_exchange_strong(expected, true)) {
      first_error_ = e;
      g_.cancel();
    }
  }
  bool failed() const { return failed_.load(); }
  Watcher* watcher() { return has_cuda_ ? &watcher_ : nullptr; }
  std::shared_ptr<std::atomic<bool>> alive() const { return alive_; }
  double since_start() const { return seconds_between(t0_, Clock::now()); }
  const std::string& device_name() const { return device_name_; }
  const Plan& plan() const { return plan_; }

  std::filesystem::path output_file(const std::filesystem::path& final_path);

 private:
  void commit_outputs();
  void rollback_outputs();
  void monitor_loop();

  const Plan& plan_;
  ExecOptions opts_;
  flow::graph g_;
  Watcher watcher_;
  bool has_cuda_ = false;
  std::string device_name_;
  std::vector<std::unique_ptr<StageNode>> nodes_;
  std::atomic<bool> failed_{false};
  std::exception_ptr first_error_;
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
  Clock::time_point t0_ = Clock::now();
  double stream_start_s_ = 0;
  std::mutex out_m_;
  std::vector<std::pair<std::filesystem::path, std::filesystem::path>> outputs_;  // temp, final
  std::atomic<bool> done_{false};
};

// The Context a stage sees during one call.
class RunContext : public Context {
 public:
  RunContext(StageNode& n, const Invocation& inv) : n_(n), inv_(inv) {}
  const std::string& stage_id() const override { return n_.inst_.id; }
  const std::string& backend() const override { return n_.inst_.backend; }
  std::int64_t item() const override { return inv_.finish || inv_.start ? -1 : inv_.index; }
  bool connected(std::string_view port) const override {
    for (auto& l : n_.inst_.inputs)
      if (l.port == port) return true;
    return false;
  }
  std::shared_ptr<const Payload> input(std::string_view port) const override {
    auto it = inv_.inputs.find(port);
    if (it != inv_.inputs.end()) return it->second;
    std::lock_guard lk(n_.m_);  // once inputs are also visible in finish()
    auto o = n_.once_.find(port);
    if (o != n_.once_.end()) return o->second;
    if (!n_.inst_.spec->input(port)) throw std::logic_error("stage has no input port '" + std::string(port) + "'");
    return nullptr;
  }
  void emit(std::string_view port, std::shared_ptr<Payload> p) override {
    if (!n_.inst_.spec->output(port)) throw std::logic_error("stage has no output port '" + std::string(port) + "'");
    if (!p) throw std::logic_error("emitted a null payload on '" + std::string(port) + "'");
    outbox.emplace_back(std::string(port), std::move(p));
  }
  const device::Stream& stream() override {
    if (!n_.stream_.valid()) throw std::logic_error("stage has no CUDA stream (backend " + n_.inst_.backend + ")");
    return n_.stream_;
  }
  void add_work(const Work& w) override {
    std::lock_guard lk(n_.metrics_m_);
    auto& m = n_.metrics_.work;
    m.visibilities += w.visibilities;
    m.updates += w.updates;
    m.bytes_h2d += w.bytes_h2d;
    m.bytes_d2h += w.bytes_d2h;
  }
  void add_work_on_device(Array<double> counters) override {
    std::lock_guard lk(n_.metrics_m_);
    n_.device_work_.push_back(std::move(counters));
  }
  std::filesystem::path output_file(const std::filesystem::path& final_path) override {
    return n_.ex_.output_file(final_path);
  }
  bool cancelled() const override { return n_.ex_.failed(); }

  std::vector<std::pair<std::string, std::shared_ptr<Payload>>> outbox;

 private:
  StageNode& n_;
  const Invocation& inv_;
};

StageNode::StageNode(Executor& ex, const StageInstance& inst, std::unique_ptr<Stage> stage)
    : ex_(ex),
      inst_(inst),
      stage_(std::move(stage)),
      serial_(inst.spec->concurrency == Concurrency::serial),
      cuda_(inst.backend == "cuda") {
  for (auto& l : inst.inputs) {
    const PortSpec* ps = inst.spec->input(l.port);
    const auto& oi = ex.plan().stages[l.from].outputs.at(l.from_port);
    (ps->arity == Arity::once || oi.arity == Arity::once ? once_ports_ : stream_ports_).push_back(l.port);
  }
  metrics_.id = inst.id;
  metrics_.type = inst.spec->type;
  metrics_.backend = inst.backend;
  metrics_.inserted = inst.inserted;
  if (cuda_) stream_ = device::Stream::create();
  PrepareContext pc{inst.id, inst.backend, false, inst.pinned_outputs};
  stage_->configure(inst.params);
  stage_->prepare(pc);
  if (is_source()) source_length_ = stage_->stream_length();
}

void StageNode::build(flow::graph& g) {
  graph_ = &g;
  for (auto& op : inst_.spec->outputs) {
    out_nodes_.push_back(std::make_unique<flow::broadcast_node<Msg>>(g));
    out[op.name] = out_nodes_.back().get();
  }
  auto concurrency = serial_ ? flow::serial : flow::unlimited;
  body_ = std::make_unique<flow::function_node<Invocation>>(g, concurrency, [this](const Invocation& inv) {
    run(inv);
    return flow::continue_msg();
  });
  if (is_source()) {
    source_ = std::make_unique<flow::input_node<Invocation>>(g, [this](tbb::flow_control& fc) {
      Invocation inv;
      if (next_tick_ >= source_length_ || ex_.failed()) {
        fc.stop();
        return inv;
      }
      inv.index = next_tick_++;
      auto alive = ex_.alive();
      auto* lim = limiter_.get();
      inv.tokens.push_back(std::make_shared<Token>(
          [lim] { lim->decrementer().try_put(flow::continue_msg()); }, ex_.watcher(), alive));
      return inv;
    });
    limiter_ = std::make_unique<flow::limiter_node<Invocation>>(g, size_t(ex_.plan().run.max_in_flight));
    flow::make_edge(*source_, *limiter_);
    flow::make_edge(*limiter_, *body_);
    {
      std::lock_guard lk(m_);
      dispatched_ = source_length_;  // every tick is a dispatch; finish once all completed
    }
  }
}

void StageNode::connect_inputs(std::vector<std::unique_ptr<StageNode>>& nodes) {
  for (auto& l : inst_.inputs) {
    std::string port = l.port;
    receivers_.push_back(std::make_unique<flow::function_node<Msg, flow::continue_msg, flow::lightweight>>(
        *graph_, flow::unlimited, [this, port](const Msg& m) {
          deliver(port, m);
          return flow::continue_msg();
        }));
    flow::make_edge(*nodes[l.from]->out.at(l.from_port), *receivers_.back());
  }
}

void StageNode::start_source() {
  if (!is_source()) return;
  Invocation inv;
  inv.start = true;
  run(inv);
}

void StageNode::activate() {
  if (source_) {
    if (source_length_ == 0) {
      std::lock_guard lk(m_);
      collect_locked();
    } else {
      source_->activate();
    }
  } else if (inst_.inputs.empty()) {
    std::lock_guard lk(m_);
    collect_locked();
  }
}

std::string StageNode::waiting_for() const {
  std::lock_guard lk(m_);
  std::string s;
  for (auto& p : once_ports_)
    if (!once_.count(p)) s += (s.empty() ? "" : ", ") + ("input '" + p + "'");
  for (auto& p : stream_ports_)
    if (!end_count_.count(p)) s += (s.empty() ? "" : ", ") + ("the end of stream '" + p + "'");
  return s;
}

void StageNode::deliver(const std::string& port, const Msg& m) {
  if (ex_.failed()) return;
  std::lock_guard lk(m_);
  bool once = std::find(once_ports_.begin(), once_ports_.end(), port) != once_ports_.end();
  if (once) {
    if (m.end) {
      // A once port fed by a stream producer that emitted nothing is caught at finish().
      return;
    }
    if (once_.count(port)) {
      ex_.fail(std::make_exception_ptr(StageError(inst_.id, inst_.backend, "", m.index,
                                                  "input '" + port + "' takes one item but received a second",
                                                  ExitCode::runtime)));
      return;
    }
    once_[port] = m.payload;
  } else if (m.end) {
    end_count_[port] = m.count;
  } else {
    pending_[m.index][port] = m;
    received_[port]++;
  }
  collect_locked();
}

// Dispatches every item that has all its inputs, then finish() when everything has arrived.
void StageNode::collect_locked() {
  if (once_.size() < once_ports_.size()) return;
  if (!stream_ports_.empty()) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (serial_ && it->first != next_index_) break;  // keep stream order
      if (it->second.size() < stream_ports_.size()) {
        if (serial_) break;
        ++it;
        continue;
      }
      Invocation inv;
      inv.index = it->first;
      for (auto& [p, m] : it->second) {
        inv.inputs[p] = m.payload;
        inv.tokens.insert(inv.tokens.end(), m.tokens.begin(), m.tokens.end());
      }
      it = pending_.erase(it);
      ++next_index_;
      dispatch_locked(std::move(inv));
    }
  } else if (!is_source() && dispatched_ == 0) {
    dispatch_locked(Invocation{});  // a stage with only once-inputs runs once
  }
  if (finish_dispatched_ || completed_ != dispatched_) return;
  for (auto& p : stream_ports_) {
    auto e = end_count_.find(p);
    if (e == end_count_.end() || received_[p] != e->second) return;
  }
  if (!pending_.empty()) return;
  finish_dispatched_ = true;
  Invocation fin;
  fin.finish = true;
  dispatch_locked(std::move(fin));
}

void StageNode::dispatch_locked(Invocation inv) {
  if (!inv.finish) ++dispatched_;
  body_->try_put(std::move(inv));
}

void StageNode::run(const Invocation& inv) {
  if (ex_.failed()) return;
  RunContext ctx(*this, inv);
  std::vector<device::Event> consumed;
  device::Event t_start;
  auto t0 = Clock::now();
  double t0s = ex_.since_start();
  try {
    if (cuda_) {
      // Order this stage's work after the writers of every device input.
      for (auto& [_, p] : inv.inputs) wait_for_device_input(*p, stream_);
      {
        std::lock_guard lk(m_);
        for (auto& [_, p] : once_) wait_for_device_input(*p, stream_);
      }
      t_start = stream_.record(true);
    }
    if (inv.start) stage_->start(ctx);
    else if (inv.finish) stage_->finish(ctx);
    else stage_->process(ctx);

    Tokens tokens = inv.tokens;
    if (cuda_) {
      device::Event t_end = stream_.record(true);
      {
        std::lock_guard lk(metrics_m_);
        timing_events_.emplace_back(t_start, t_end);
      }
      stamp_device(inv, ctx.outbox, tokens);
    }
    if (inv.finish || inv.start) {
      for (auto& [port, p] : ctx.outbox) forward(port, std::move(p), {}, -1);
    } else {
      for (auto& [port, p] : ctx.outbox) forward(port, std::move(p), tokens, inv.index);
    }
  } catch (const InputError& e) {
    ex_.fail(std::make_exception_ptr(StageError(inst_.id, inst_.backend, cuda_ ? ex_.device_name() : "host",
                                                item_of(inv), e.what(), ExitCode::input)));
  } catch (const std::exception& e) {
    ex_.fail(std::make_exception_ptr(StageError(inst_.id, inst_.backend, cuda_ ? ex_.device_name() : "host",
                                                item_of(inv), e.what(), ExitCode::runtime)));
  }
  auto t1 = Clock::now();
  {
    std::lock_guard lk(metrics_m_);
    metrics_.wall_s += seconds_between(t0, t1);
    if (metrics_.busy_from < 0 || t0s < metrics_.busy_from) metrics_.busy_from = t0s;
    metrics_.busy_to = std::max(metrics_.busy_to, ex_.since_start());
    if (!inv.finish && !inv.start) metrics_.items_in++;
  }
  if (ex_.failed() || inv.start) return;
  if (inv.finish) {
    // End every output stream; a once output must have been produced exactly once.
    for (auto& op : inst_.spec->outputs) {
      std::int64_t n;
      {
        std::lock_guard lk(m_);
        n = emitted_[op.name];
      }
      const auto& oi = inst_.outputs.at(op.name);
      if (oi.arity == Arity::once && n != 1) {
        ex_.fail(std::make_exception_ptr(StageError(inst_.id, inst_.backend, "", -1,
                                                    "finished without producing its output '" + op.name + "'",
                                                    ExitCode::internal)));
        return;
      }
      if (oi.arity == Arity::stream) {
        Msg end;
        end.end = true;
        end.count = n;
        out.at(op.name)->try_put(end);
      }
    }
    finished_ = true;
    return;
  }
  std::lock_guard lk(m_);
  ++completed_;
  collect_locked();
}

void StageNode::stamp_device(const Invocation& inv,
                             const std::vector<std::pair<std::string, std::shared_ptr<Payload>>>& outbox,
                             Tokens& tokens) {
  device::Event done = stream_.record();
  std::vector<const Payload*> in, out;
  std::vector<std::shared_ptr<const Payload>> keep;
  for (auto& [_, p] : inv.inputs) {
    in.push_back(p.get());
    keep.push_back(p);
  }
  for (auto& [_, p] : outbox) out.push_back(p.get());
  stamp_device_use(in, out, done);
  for (auto& t : tokens) t->add_pending(done);
  // Host memory the device is still copying from must outlive the copy.
  ex_.watcher()->after({done}, [keep = std::move(keep)] {});
}

void StageNode::forward(const std::string& port, std::shared_ptr<const Payload> p, const Tokens& tokens,
                        std::int64_t index) {
  const auto& oi = inst_.outputs.at(port);
  std::int64_t seq;
  {
    std::lock_guard lk(m_);
    seq = emitted_[port]++;
  }
  if (oi.arity == Arity::once && seq > 0)
    throw std::logic_error("emitted more than one item on once output '" + port + "'");
  Msg m;
  m.payload = std::move(p);
  m.index = serial_ || index < 0 ? seq : index;
  if (oi.arity == Arity::stream) m.tokens = tokens;
  {
    std::lock_guard lk(metrics_m_);
    metrics_.items_out++;
  }
  auto* node = out.at(port);
  auto* self = this;
  if (cuda_ && m.payload->location() == Location::host) {
    // A download: hand it on only when the copy has landed.
    auto alive = ex_.alive();
    auto done = stream_.record();
    ex_.watcher()->after({done}, [node, m, alive, self] {
      if (!alive->load()) return;
      self->note_output();
      node->try_put(m);
    });
  } else {
    note_output();
    node->try_put(m);
  }
}

void StageNode::note_output() {
  std::lock_guard lk(metrics_m_);
  metrics_.last_output_s = ex_.since_start();
}

StageMetrics StageNode::metrics() const {
  std::lock_guard lk(metrics_m_);
  StageMetrics m = metrics_;
  for (auto& [a, b] : timing_events_)
    if (a.ready() && b.ready()) m.device_s += b.elapsed_since(a) / 1e3;
  return m;
}

std::filesystem::path Executor::output_file(const std::filesystem::path& final_path) {
  std::filesystem::path f = final_path;
  if (f.has_parent_path()) std::filesystem::create_directories(f.parent_path());
  auto tmp = f.parent_path() / ("." + f.filename().string() + ".uvflow-" + std::to_string(getpid()) + ".tmp");
  std::lock_guard lk(out_m_);
  for (auto& [t, fin] : outputs_)
    if (fin == f) throw std::runtime_error("two outputs are written to " + f.string());
  outputs_.emplace_back(tmp, f);
  return tmp;
}

void Executor::commit_outputs() {
  for (auto& [tmp, fin] : outputs_) {
    std::error_code ec;
    // rename() replaces a file but not a directory (a Measurement Set): move the old one aside,
    // and delete it once the new one is in place.
    std::filesystem::path old;
    if (std::filesystem::is_directory(tmp) && std::filesystem::exists(fin)) {
      old = tmp.string() + ".old";
      std::filesystem::rename(fin, old, ec);
      if (ec) throw std::runtime_error("cannot move " + fin.string() + " aside to replace it: " + ec.message());
    }
    std::filesystem::rename(tmp, fin, ec);
    if (ec) throw std::runtime_error("cannot move " + tmp.string() + " to " + fin.string() + ": " + ec.message());
    if (!old.empty()) std::filesystem::remove_all(old, ec);
  }
}

void Executor::rollback_outputs() {
  for (auto& [tmp, fin] : outputs_) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);  // a file, or a directory (a Measurement Set)
  }
}

void Executor::monitor_loop() {
  const bool draw = opts_.progress && isatty(2);
  auto last_draw = Clock::now();
  bool drew = false;
  while (!done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_interrupt.load()) {
      fail(std::make_exception_ptr(Interrupted()));
    }
    if (draw && seconds_between(last_draw, Clock::now()) > 0.5) {
      last_draw = Clock::now();
      std::ostringstream s;
      s << "\r[" << std::fixed << std::setprecision(1) << since_start() << " s]";
      for (auto& n : nodes_)
        if (n->is_source() && n->progress_total() > 0)
          s << " " << n->inst().id << " " << n->progress_done() << "/" << n->progress_total();
      for (auto& n : nodes_)
        if (!n->is_source()) {
          auto m = n->metrics();
          if (m.items_in > 0 && !n->finished()) s << " | " << n->inst().id << " " << m.items_in;
        }
      std::string line = s.str().substr(0, 160);
      std::fprintf(stderr, "%s\033[K", line.c_str());
      drew = true;
    }
  }
  if (drew) std::fprintf(stderr, "\r\033[K");
}

RunReport Executor::run() {
  std::unique_ptr<tbb::global_control> threads;
  if (plan_.run.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                    size_t(plan_.run.threads));
  std::vector<Diagnostic> env;
  for (auto& st : plan_.stages)
    if (st.backend == "cuda") {
      has_cuda_ = true;
      // Inserted transfers exist because of a cuda stage, which is reported itself.
      if (device::count() == 0 && !st.inserted)
        env.push_back({st.pos, "stage '" + st.id + "' (" + st.spec->type + ") uses backend cuda, but " +
                                   (device::compiled() ? std::string("no CUDA device is available")
                                                       : std::string("uvflow was built without CUDA")) +
                                   "; use --set " + st.id + ".backend=cpu"});
    }
  if (!env.empty()) throw ConfigError(env);
  device_name_ = has_cuda_ ? device::describe(0) : "host";
  if (has_cuda_ && plan_.run.pinned_pool_mb > 0) {
    const auto t = Clock::now();
    PinnedPool::global().reserve(std::size_t(plan_.run.pinned_pool_mb) << 20);
    spdlog::info("reserved {} MB of pinned host memory in {:.2f} s", plan_.run.pinned_pool_mb,
                 seconds_between(t, Clock::now()));
  }
  if (has_cuda_ && plan_.run.device_pool_mb > 0) {
    const auto t = Clock::now();
    device::reserve_pool(std::size_t(plan_.run.device_pool_mb) << 20);
    spdlog::info("mapped {} MB into the device memory pool in {:.2f} s", plan_.run.device_pool_mb,
                 seconds_between(t, Clock::now()));
  }
  if (has_cuda_) {
    watcher_.on_error = [this](std::exception_ptr e) { fail(e); };
    watcher_.start();
  }
  t0_ = Clock::now();
  for (auto& st : plan_.stages) {
    try {
      nodes_.push_back(std::make_unique<StageNode>(*this, st, st.spec->backend(st.backend)->make()));
    } catch (const InputError& e) {
      throw StageError(st.id, st.backend, "", -1, std::string("prepare: ") + e.what(), ExitCode::input);
    } catch (const std::exception& e) {
      throw StageError(st.id, st.backend, "", -1, std::string("prepare: ") + e.what(), ExitCode::runtime);
    }
  }
  for (auto& n : nodes_) n->build(g_);
  for (auto& n : nodes_) n->connect_inputs(nodes_);
  std::thread monitor([this] { monitor_loop(); });
  for (auto& n : nodes_) n->start_source();
  if (plan_.run.once_first) g_.wait_for_all();  // the kernel stack and the like, before streaming
  stream_start_s_ = since_start();
  if (!failed_)
    for (auto& n : nodes_) n->activate();
  g_.wait_for_all();
  if (has_cuda_) {
    for (auto& n : nodes_) {
      try {
        n->sync_device();
        if (!failed_) n->collect_device_work();
      } catch (...) {
        fail(std::current_exception());
      }
    }
  }
  done_ = true;
  monitor.join();
  if (!failed_) {
    for (auto& n : nodes_)
      if (!n->finished()) {
        auto w = n->waiting_for();
        fail(std::make_exception_ptr(StageError(n->inst().id, n->inst().backend, "", -1,
                                                "never finished" + (w.empty() ? std::string() : ": still waiting for " + w),
                                                ExitCode::internal)));
        break;
      }
  }
  RunReport r;
  r.pipeline = plan_.name;
  r.file = plan_.file.string();
  r.device = device_name_;
  r.wall_s = since_start();
  r.stream_start_s = stream_start_s_;
  for (auto& n : nodes_) r.stages.push_back(n->metrics());
  alive_->store(false);
  if (failed_) {
    rollback_outputs();
    watcher_.stop();
    std::rethrow_exception(first_error_);
  }
  commit_outputs();
  for (auto& [t, f] : outputs_) r.outputs.push_back(f.string());
  watcher_.stop();
  return r;
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void request_interrupt() { g_interrupt.store(true); }

const StageMetrics& RunReport::stage(std::string_view id) const {
  for (const auto& m : stages)
    if (m.id == id) return m;
  throw std::out_of_range("the run report has no stage '" + std::string(id) + "'");
}

RunReport run_plan(const Plan& plan, const ExecOptions& opts) {
  // An interrupt that arrives before the run starts cancels it; the flag is cleared when the run
  // ends, so a later run in the same process starts clean.
  struct ClearInterrupt {
    ~ClearInterrupt() { g_interrupt.store(false); }
  } clear;
  Executor ex(plan, opts);
  return ex.run();
}

void dry_run_prepare(const Plan& plan) {
  std::vector<Diagnostic> diags;
  for (auto& st : plan.stages) {
    try {
      auto s = st.spec->backend(st.backend)->make();
      s->configure(st.params);
      PrepareContext pc{st.id, st.backend, true, st.pinned_outputs};
      s->prepare(pc);
    } catch (const std::exception& e) {
      diags.push_back({st.pos, "stage '" + st.id + "' (" + st.spec->type + "): " + e.what()});
    }
  }
  if (!diags.empty()) throw ConfigError(diags);
}

static std::string fmt_rate(double x) {
  if (x <= 0) return "-";
  std::ostringstream s;
  s << std::setprecision(3);
  if (x >= 1e9) s << x / 1e9 << " G";
  else if (x >= 1e6) s << x / 1e6 << " M";
  else if (x >= 1e3) s << x / 1e3 << " k";
  else s << x << " ";
  return s.str();
}

std::string format_report(const RunReport& r) {
  std::ostringstream s;
  s << "run " << r.pipeline << " on " << r.device << ": " << std::fixed << std::setprecision(3) << r.wall_s
    << " s wall\n";
  s << std::left << std::setw(30) << "stage" << std::setw(24) << "type" << std::setw(6) << "bknd" << std::right
    << std::setw(7) << "items" << std::setw(11) << "wall ms" << std::setw(11) << "device ms" << std::setw(10)
    << "H->D MB" << std::setw(10) << "D->H MB" << std::setw(12) << "vis/s" << std::setw(13) << "updates/s" << "\n";
  double h2d = 0, d2h = 0;
  for (auto& m : r.stages) {
    double t = m.time_s();
    s << std::left << std::setw(30) << m.id.substr(0, 29) << std::setw(24) << m.type.substr(0, 23) << std::setw(6)
      << m.backend << std::right << std::setw(7) << m.items_in << std::setw(11) << std::setprecision(2)
      << m.wall_s * 1e3 << std::setw(11);
    if (m.backend == "cuda") s << m.device_s * 1e3;
    else s << "-";
    s << std::setw(10) << m.work.bytes_h2d / 1e6 << std::setw(10) << m.work.bytes_d2h / 1e6 << std::setw(12)
      << (t > 0 ? fmt_rate(m.work.visibilities / t) : "-") << std::setw(13)
      << (t > 0 ? fmt_rate(m.work.updates / t) : "-") << "\n";
    h2d += m.work.bytes_h2d;
    d2h += m.work.bytes_d2h;
  }
  s << "bytes over the bus: host->device " << std::setprecision(3) << h2d / 1e6 << " MB, device->host "
    << d2h / 1e6 << " MB\n";
  for (auto& o : r.outputs) s << "wrote " << o << "\n";
  return s.str();
}

std::string report_json(const RunReport& r) {
  nlohmann::json j;
  j["pipeline"] = r.pipeline;
  j["file"] = r.file;
  j["device"] = r.device;
  j["wall_s"] = r.wall_s;
  j["stream_start_s"] = r.stream_start_s;
  j["outputs"] = r.outputs;
  for (auto& m : r.stages) {
    double t = m.time_s();
    j["stages"].push_back({{"id", m.id},
                           {"type", m.type},
                           {"backend", m.backend},
                           {"inserted", m.inserted},
                           {"items_in", m.items_in},
                           {"items_out", m.items_out},
                           {"wall_s", m.wall_s},
                           {"device_s", m.device_s},
                           {"busy_from_s", m.busy_from},
                           {"busy_to_s", m.busy_to},
                           {"last_output_s", m.last_output_s},
                           {"bytes_h2d", m.work.bytes_h2d},
                           {"bytes_d2h", m.work.bytes_d2h},
                           {"visibilities", m.work.visibilities},
                           {"updates", m.work.updates},
                           {"visibilities_per_s", t > 0 ? m.work.visibilities / t : 0.0},
                           {"updates_per_s", t > 0 ? m.work.updates / t : 0.0}});
  }
  return j.dump(2);
}

}  // namespace uvflow
