#include "graph/stage_node.hpp"

#include <algorithm>
#include <cstdio>

#include "graph/interrupt.hpp"

#include "runtime/error.hpp"

namespace uvflow {
namespace flow = tbb::flow;

namespace {
long long item_of(const Invocation& inv) { return inv.start ? StageError::kStart : inv.finish ? -1 : inv.index; }
}  // namespace

StageNode::StageNode(RunState& run, const StageInstance& inst, std::unique_ptr<Stage> stage)
    : run_(run),
      inst_(inst),
      stage_(std::move(stage)),
      serial_(inst.spec->concurrency == Concurrency::serial),
      cuda_(inst.backend == "cuda"),
      state_(*inst.spec, inst.id, inst.backend, run.files) {
  for (auto& l : inst.inputs) {
    const PortSpec* ps = inst.spec->input(l.port);
    const auto& oi = run.plan.stages[l.from].outputs.at(l.from_port);
    (ps->arity == Arity::once || oi.arity == Arity::once ? once_ports_ : stream_ports_).push_back(l.port);
    state_.connected.push_back(l.port);
  }
  state_.cancelled = &run.failed;
  metrics_.id = inst.id;
  metrics_.type = inst.spec->type;
  metrics_.backend = inst.backend;
  metrics_.inserted = inst.inserted;
  if (cuda_) state_.stream = device::Stream::create();
  PrepareContext pc = prepare_context(run.plan, inst, false, state_.stream);
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
      if (next_tick_ >= source_length_ || run_.failed) {
        fc.stop();
        return inv;
      }
      inv.index = next_tick_++;
      inv.tick = true;  // its token is made when it runs (run()): input_node keeps a copy of the
                        // last item it handed out, which would hold the permit past its release
      return inv;
    });
    limiter_ = std::make_unique<flow::limiter_node<Invocation>>(g, size_t(run_.plan.run.max_in_flight));
    flow::make_edge(*source_, *limiter_);
    flow::make_edge(*limiter_, *body_);
    {
      std::lock_guard lk(m_);
      dispatched_ = source_length_;  // every tick is a dispatch; finish once all completed
    }
  }
}

void StageNode::connect_inputs(const OutputOf& source) {
  for (auto& l : inst_.inputs) {
    std::string port = l.port;
    receivers_.push_back(std::make_unique<flow::function_node<Msg, flow::continue_msg, flow::lightweight>>(
        *graph_, flow::unlimited, [this, port](const Msg& m) {
          deliver(port, m);
          return flow::continue_msg();
        }));
    flow::make_edge(source(l), *receivers_.back());
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
  if (run_.failed) return;
  std::lock_guard lk(m_);
  bool once = std::find(once_ports_.begin(), once_ports_.end(), port) != once_ports_.end();
  if (once) {
    if (m.end) {
      // A once port fed by a stream producer that emitted nothing is caught at finish().
      return;
    }
    if (once_.count(port)) {
      run_.fail(std::make_exception_ptr(StageError(inst_.id, inst_.backend, "", m.index,
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
  if (run_.failed) return;
  device::Event t_start;
  auto t0 = Clock::now();
  double t0s = run_.since_start();
  Tokens tokens = inv.tokens;
  if (inv.tick) {
    auto* lim = limiter_.get();
    tokens.push_back(std::make_shared<Token>([lim] { lim->decrementer().try_put(flow::continue_msg()); },
                                             run_.watcher, run_.alive));
  }
  try {
    PayloadMap inputs = inv.inputs;
    {
      std::lock_guard lk(m_);  // once inputs are also visible in finish()
      inputs.insert(once_.begin(), once_.end());
    }
    if (cuda_) {
      order_after_inputs(inputs, state_.stream);
      t_start = state_.stream.record(true);
    }
    StageContext ctx(state_, item_of(inv), std::move(inputs));
    {
      // A crash in the stage (a plugin's too) is reported with these words (graph/interrupt).
      char item[32], where[160];
      if (inv.start || inv.finish) std::snprintf(item, sizeof item, "%s", inv.start ? "start" : "end of stream");
      else std::snprintf(item, sizeof item, "item %lld", static_cast<long long>(inv.index));
      std::snprintf(where, sizeof where, "stage '%s' (backend %s, %s)", inst_.id.c_str(), inst_.backend.c_str(), item);
      CrashScope scope(where);
      if (inv.start) stage_->start(ctx);
      else if (inv.finish) stage_->finish(ctx);
      else stage_->process(ctx);
    }

    if (cuda_) {
      device_times_.add(t_start, state_.stream.record(true), !(inv.start || inv.finish) || !ctx.outbox.empty());
      stamp_call(state_.stream, inv.inputs, ctx.outbox, tokens, *run_.watcher);
    }
    if (inv.finish || inv.start) {
      for (auto& [port, p] : ctx.outbox) forward(port, std::move(p), {}, -1);
    } else {
      for (auto& [port, p] : ctx.outbox) forward(port, std::move(p), tokens, inv.index);
    }
  } catch (const InputError& e) {
    run_.fail(std::make_exception_ptr(StageError(inst_.id, inst_.backend, cuda_ ? run_.device_name : "host",
                                                 item_of(inv), e.what(), ExitCode::input)));
  } catch (const std::exception& e) {
    run_.fail(std::make_exception_ptr(StageError(inst_.id, inst_.backend, cuda_ ? run_.device_name : "host",
                                                 item_of(inv), error_text(e), ExitCode::runtime)));
  }
  auto t1 = Clock::now();
  {
    std::lock_guard lk(metrics_m_);
    metrics_.wall_s += seconds_between(t0, t1);
    if (metrics_.busy_from < 0 || t0s < metrics_.busy_from) metrics_.busy_from = t0s;
    metrics_.busy_to = std::max(metrics_.busy_to, run_.since_start());
    if (!inv.finish && !inv.start) metrics_.items_in++;
  }
  if (run_.failed || inv.start) return;
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
        run_.fail(std::make_exception_ptr(StageError(inst_.id, inst_.backend, "", -1,
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
    auto alive = run_.alive;
    auto done = state_.stream.record();
    run_.watcher->after({done}, [node, m, alive, self] {
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
  metrics_.last_output_s = run_.since_start();
}

StageMetrics StageNode::metrics() const {
  std::lock_guard lk(metrics_m_);
  StageMetrics m = metrics_;
  m.work = state_.work.host();
  m.device_s = device_times_.seconds();
  if (run_.device_origin.valid() &&
      !device_times_.span(run_.device_origin, run_.device_origin_s, m.device_from, m.device_to))
    m.device_from = m.device_to = -1;
  return m;
}

}  // namespace uvflow
