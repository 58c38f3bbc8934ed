#include "graph/plan_runner.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>

#include "graph/interrupt.hpp"
#include "runtime/error.hpp"
#include "runtime/payloads/cycle.hpp"

namespace uvflow {
namespace flow = tbb::flow;

namespace {

// A value held from an earlier graph, put back on a graph: a source that emits it as it was
// produced (a once item in start(), or the stream's items in order, each with a token of this graph).
// (A spilled item is read back here, one at a time as the stream's tokens allow.)
class Feed : public Stage {
 public:
  Feed(std::string port, Arity arity, std::vector<HeldItem> items)
      : port_(std::move(port)), arity_(arity), items_(std::move(items)) {}
  std::int64_t stream_length() const override { return arity_ == Arity::stream ? std::int64_t(items_.size()) : 0; }
  void start(Context& ctx) override {
    if (arity_ == Arity::once) ctx.emit(port_, std::const_pointer_cast<Payload>(items_.at(0).get()));
  }
  void process(Context& ctx) override {
    ctx.emit(port_, std::const_pointer_cast<Payload>(items_.at(std::size_t(ctx.item())).get()));
  }

 private:
  std::string port_;
  Arity arity_;
  std::vector<HeldItem> items_;
};

// What a graph hands on to a later one: an output's items by index (tokens dropped: the values are
// held, not in flight), the stream's item count and the output's scratch file, if it has spilled.
struct Tap {
  std::mutex m;
  std::map<std::int64_t, HeldItem> items;
  std::int64_t count = -1;
  HeldOutput out;
};

}  // namespace

void PlanRunner::run() {
  const auto& st = plan().stages;
  // Each outside stage's level: the number of loops before it (a loop's exit is one level past the
  // loop); a loop's level is that of the latest outside value its body or state reads.
  std::vector<int> level(st.size(), 0);
  std::map<std::string, int> loop_level;
  for (auto& lp : plan().loops) loop_level[lp.id] = 0;
  auto level_of = [&](const InputLink& l) {
    const StageInstance& p = st[std::size_t(l.from)];
    if (p.role == LoopRole::exit) return loop_level[p.loop] + 1;
    return p.role == LoopRole::none ? level[std::size_t(l.from)] : 0;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < st.size(); ++i) {
      int v = 0;
      for (auto& l : st[i].inputs) v = std::max(v, level_of(l));
      int& at = st[i].role == LoopRole::none ? level[i] : loop_level[st[i].loop];
      if (st[i].role != LoopRole::exit && v > at) at = v, changed = true;
    }
  }
  int last = 0;
  for (std::size_t i = 0; i < st.size(); ++i) last = std::max(last, level[i]);
  for (auto& [id, v] : loop_level) last = std::max(last, v);
  // When a held value's last reader has run, the value goes (the data a loop read, once it is over).
  auto done_by = [&](int j, int k) {
    const StageInstance& c = st[std::size_t(j)];
    return c.role == LoopRole::none ? level[std::size_t(j)] <= k : loop_level[c.loop] <= k;
  };
  for (int k = 0; k <= last && !run_.failed; ++k) {
    std::vector<int> members;
    for (std::size_t i = 0; i < st.size(); ++i)
      if (st[i].role == LoopRole::none && level[i] == k) members.push_back(int(i));
    if (!members.empty()) run_graph(members, {});
    for (auto& lp : plan().loops)
      if (!run_.failed && loop_level[lp.id] == k) run_loop(lp);
    for (auto it = held_.begin(); it != held_.end();) {
      bool read_later = false;
      for (std::size_t j = 0; j < st.size() && !read_later; ++j)
        for (auto& l : st[j].inputs)
          read_later = read_later || (l.from == it->first.first && l.from_port == it->first.second && !done_by(int(j), k));
      it = read_later ? std::next(it) : held_.erase(it);
    }
  }
}

void PlanRunner::run_graph(const std::vector<int>& members, const std::set<PortKey>& also_keep,
                           std::vector<CycleReport::StageTime>* times) {
  const auto& st = plan().stages;
  std::vector<bool> member(st.size(), false);
  for (int i : members) member[std::size_t(i)] = true;
  flow::graph g;
  Watcher watcher(g);
  std::deque<StageSpec> feed_specs;
  std::deque<StageInstance> feed_insts;
  std::deque<Tap> taps;
  std::vector<std::unique_ptr<flow::function_node<Msg, flow::continue_msg, flow::lightweight>>> tap_nodes;
  std::map<PortKey, Tap*> tapped;
  // The nodes go before the graph they are on, whatever happens below.
  struct Release {
    PlanRunner& r;
    ~Release() {
      std::lock_guard lk(r.nodes_m_);
      r.nodes_.clear();
    }
  } release{*this};
  bool cuda = false;
  for (int i : members) cuda = cuda || st[std::size_t(i)].backend == "cuda";
  run_.alive = std::make_shared<std::atomic<bool>>(true);
  if (cuda) {
    watcher.on_error = [this](std::exception_ptr e) { run_.fail(e); };
    watcher.start();
    run_.watcher = &watcher;
  }
  run_.attach(&g);
  std::vector<std::unique_ptr<StageNode>> nodes;
  std::map<PortKey, StageNode*> feeds;
  try {
    for (int i : members) {
      const StageInstance& s = st[std::size_t(i)];
      try {
        CrashScope scope(("stage '" + s.id + "' (backend " + s.backend + ", setup)").c_str());
        nodes.push_back(std::make_unique<StageNode>(run_, s, s.spec->backend(s.backend)->make()));
      } catch (const InputError& e) {
        throw StageError(s.id, s.backend, "", StageError::kSetup, std::string("prepare: ") + e.what(), ExitCode::input);
      } catch (const std::exception& e) {
        throw StageError(s.id, s.backend, "", StageError::kSetup, "prepare: " + error_text(e), ExitCode::runtime);
      }
    }
    for (int i : members)
      for (auto& l : st[std::size_t(i)].inputs) {
        const PortKey k{l.from, l.from_port};
        if (member[std::size_t(l.from)] || feeds.count(k)) continue;
        const Held& h = held_.at(k);
        const OutputInfo& oi = st[std::size_t(l.from)].outputs.at(l.from_port);
        feed_specs.push_back({.type = "loop.feed", .outputs = {{l.from_port, oi.type, oi.arity, Residency::any, "", false}}});
        StageInstance fi;
        fi.id = st[std::size_t(l.from)].id;
        fi.spec = &feed_specs.back();
        fi.backend = "loop";
        fi.outputs[l.from_port] = oi;
        feed_insts.push_back(std::move(fi));
        nodes.push_back(std::make_unique<StageNode>(run_, feed_insts.back(), std::make_unique<Feed>(l.from_port, h.arity, h.items)));
        feeds[k] = nodes.back().get();
      }
    {
      std::lock_guard lk(nodes_m_);
      nodes_ = std::move(nodes);
    }
    for (auto& n : nodes_) n->build(g);
    std::map<PortKey, flow::broadcast_node<Msg>*> outs;
    for (std::size_t k = 0; k < members.size(); ++k)
      for (auto& [port, b] : nodes_[k]->out) outs[{members[k], port}] = b;
    for (auto& [k, n] : feeds) outs[k] = n->out.at(k.second);
    for (auto& n : nodes_) n->connect_inputs([&](const InputLink& l) -> flow::broadcast_node<Msg>& { return *outs.at({l.from, l.from_port}); });
    // Keep what a later graph reads: outputs read outside this one, and those asked for.
    for (int i : members)
      for (auto& [port, oi] : st[std::size_t(i)].outputs) {
        const PortKey k{i, port};
        bool keep = also_keep.count(k) > 0;
        for (std::size_t j = 0; j < st.size() && !keep; ++j)
          if (!member[j])
            for (auto& l : st[j].inputs) keep = keep || (l.from == i && l.from_port == port);
        if (!keep) continue;
        Tap* t = &taps.emplace_back();
        tapped[k] = t;
        const Arity arity = oi.arity;
        const StageInstance& from = st[std::size_t(i)];
        tap_nodes.push_back(std::make_unique<flow::function_node<Msg, flow::continue_msg, flow::lightweight>>(
            g, flow::unlimited, [this, t, arity, &from, port](const Msg& m) {
              std::lock_guard lk(t->m);
              if (m.end) {
                t->count = m.count;
              } else {
                try {
                  t->items[m.index] = budget_.hold(m.payload, arity, t->out, from.id + "." + port);
                } catch (const std::exception& e) {
                  run_.fail(std::make_exception_ptr(StageError(from.id, from.backend,
                                                               from.backend == "cuda" ? run_.device_name : "host", m.index,
                                                               "holding output '" + port + "' for a later graph: " + e.what(),
                                                               ExitCode::runtime)));
                }
              }
              return flow::continue_msg();
            }));
        flow::make_edge(*outs.at(k), *tap_nodes.back());
      }
    for (auto& n : nodes_) n->start_source();
    if (plan().run.once_first) g.wait_for_all();  // the kernel stack and the like, before streaming
    if (stream_start_s_ < 0) stream_start_s_ = run_.since_start();
    if (cuda && !run_.device_origin.valid()) {
      // The clock is read before the record: the device cannot take the event earlier, so device
      // times are placed no later than they happened (early by the record's latency, microseconds).
      const device::Stream origin = device::Stream::create();
      run_.device_origin_s = run_.since_start();
      run_.device_origin = origin.record(true);
    }
    if (!run_.failed)
      for (auto& n : nodes_) n->activate();
    g.wait_for_all();
    if (cuda)
      for (auto& n : nodes_) {
        try {
          n->sync_device();
          if (!run_.failed) n->collect_device_work();
        } catch (...) {
          run_.fail(std::current_exception());
        }
      }
    if (!run_.failed)
      for (auto& n : nodes_)
        if (!n->finished()) {
          auto w = n->waiting_for();
          run_.fail(std::make_exception_ptr(StageError(n->inst().id, n->inst().backend, "", -1,
                                                       "never finished" + (w.empty() ? std::string() : ": still waiting for " + w),
                                                       ExitCode::internal)));
          break;
        }
    for (auto& n : nodes_)
      if (n->inst().spec->type != "loop.feed") {
        const StageMetrics m = n->metrics();
        add_metrics(m);
        if (times) times->push_back({m.id, m.wall_s, m.device_s});
      }
    if (!run_.failed)
      for (auto& [k, t] : tapped) {
        Held h{st[std::size_t(k.first)].outputs.at(k.second).arity, {}};
        const auto on_host = std::count_if(t->items.begin(), t->items.end(), [](auto& x) { return x.second.on_host(); });
        if (t->out.file || on_host) {
          const std::string name = st[std::size_t(k.first)].id + "." + k.second;
          const auto spilled = std::count_if(t->items.begin(), t->items.end(), [](auto& x) { return x.second.spilled(); });
          const double bytes = t->out.file ? double(t->out.file->bytes()) : 0;
          if (budget_.first_time(name + " summary"))
            spdlog::info("{}: of {} items, {}{} ({:.3g} GB) in the scratch file (the run report sums the graphs)", name,
                         t->items.size(),
                         on_host ? std::to_string(on_host) + " held in host memory past the device budget, " : "",
                         spilled, bytes / 1e9);
          HeldReport& hr = held_report_[name];
          hr.output = name;
          hr.items += std::int64_t(t->items.size());
          hr.items_on_host += on_host;
          hr.spilled_items += spilled;
          hr.spilled_bytes += bytes;
        }
        for (auto& [index, p] : t->items) {
          if (index != std::int64_t(h.items.size()))
            throw std::logic_error("output '" + k.second + "' of stage '" + st[std::size_t(k.first)].id + "' lost item " +
                                   std::to_string(h.items.size()));
          h.items.push_back(p);
        }
        if (h.arity == Arity::stream && t->count != std::int64_t(h.items.size()))
          throw std::logic_error("output '" + k.second + "' of stage '" + st[std::size_t(k.first)].id + "' ended after " +
                                 std::to_string(t->count) + " items but " + std::to_string(h.items.size()) + " arrived");
        if (h.arity == Arity::once && h.items.size() != 1)
          throw std::logic_error("once output '" + k.second + "' of stage '" + st[std::size_t(k.first)].id + "' gave " +
                                 std::to_string(h.items.size()) + " items");
        held_[k] = std::move(h);
      }
  } catch (...) {
    run_.fail(std::current_exception());
  }
  run_.alive->store(false);
  watcher.stop();
  run_.watcher = nullptr;
  run_.attach(nullptr);
}

void PlanRunner::run_loop(const LoopPlan& lp) {
  const auto& st = plan().stages;
  const int control = plan().index_of(lp.id + ".control"), exit = plan().index_of(lp.id);
  if (control < 0 || exit < 0) return;  // left out of this rank's plan (graph/ranks), with what it feeds
  auto exit_link = [&](const std::string& port) -> const InputLink& {
    for (auto& l : st[std::size_t(exit)].inputs)
      if (l.port == port) return l;
    throw std::logic_error("loop '" + lp.id + "' has no value '" + port + "'");
  };
  std::vector<int> body;
  for (std::size_t i = 0; i < st.size(); ++i)
    if (st[i].role == LoopRole::body && st[i].loop == lp.id) body.push_back(int(i));
  struct Carried {
    PortKey value, next;
  };
  std::vector<Carried> state;
  for (auto& x : lp.state) {
    const int s = plan().index_of(x.name);
    const InputLink& init = st[std::size_t(s)].inputs.at(0);
    const InputLink& next = exit_link(x.name);
    state.push_back({{s, "value"}, {next.from, next.from_port}});
    held_[state.back().value] = held_.at({init.from, init.from_port});
  }
  std::set<PortKey> keep;
  const PortKey figures{lp.figures.empty() ? -1 : plan().index_of(lp.figures), lp.figures_port};
  if (figures.first >= 0) keep.insert(figures);
  LoopReport rep{.id = lp.id};
  std::int64_t total = 0;
  double model_flux = 0;
  for (std::int64_t c = 0; c < lp.stop.max_cycles && !run_.failed; ++c) {
    auto ctl = std::make_shared<CycleControl>();
    ctl->cycle = c;
    ctl->max_cycles = lp.stop.max_cycles;
    ctl->threshold_jy = lp.stop.threshold;
    ctl->threshold_sigma = lp.stop.threshold_sigma;
    ctl->major_gain = lp.stop.major_gain;
    ctl->minor_iterations_left = lp.stop.max_minor_iterations > 0 ? lp.stop.max_minor_iterations - total : -1;
    held_[{control, "control"}] = Held{Arity::once, {HeldItem(ctl)}};
    const auto t0 = Clock::now();
    std::vector<CycleReport::StageTime> times;
    run_graph(body, keep, &times);
    if (run_.failed) return;
    for (auto& s : state) held_[s.value] = held_.at(s.next);
    CycleReport cr{.cycle = c, .wall_s = seconds_between(t0, Clock::now()), .stages = std::move(times)};
    std::string stop;
    if (figures.first >= 0) {
      auto f = std::dynamic_pointer_cast<const CycleFigures>(held_.at(figures).items.at(0).get());
      if (!f) throw std::logic_error("loop '" + lp.id + "': figures are not CycleFigures");
      total += f->iterations;
      model_flux = f->model_flux;
      cr.peak_start = f->peak_start, cr.peak = f->peak, cr.noise = f->noise, cr.flux = f->flux;
      cr.iterations = f->iterations, cr.minor_stop = f->stop;
      if (lp.stop.threshold > 0 && f->peak <= lp.stop.threshold) stop = "threshold";
      else if (lp.stop.threshold_sigma > 0 && f->peak <= lp.stop.threshold_sigma * f->noise) stop = "threshold_sigma";
      else if (lp.stop.max_minor_iterations > 0 && total >= lp.stop.max_minor_iterations) stop = "max_minor_iterations";
      else if (f->iterations == 0) stop = "no_components";
    }
    cr.model_flux = model_flux;
    cr.total_iterations = total;
    if (stop.empty() && c + 1 >= lp.stop.max_cycles) stop = "max_cycles";
    const std::string stopped = stop.empty() ? std::string() : "; stopped by " + stop;
    if (figures.first >= 0)
      spdlog::info("loop {}: cycle {}: peak residual {:.6g} -> {:.6g} Jy/beam, noise {:.3g}, {} components, {:.6g} Jy "
                   "cleaned ({:.6g} Jy in the model), {:.2f} s{}",
                   lp.id, c, cr.peak_start, cr.peak, cr.noise, cr.iterations, cr.flux, cr.model_flux, cr.wall_s, stopped);
    else
      spdlog::info("loop {}: cycle {}: {:.2f} s{}", lp.id, c, cr.wall_s, stopped);
    rep.cycles.push_back(cr);
    rep.stopped_by = stop;
    if (!stop.empty()) break;
  }
  loops_.push_back(rep);
  if (run_.failed) return;
  for (std::size_t k = 0; k < lp.state.size(); ++k) held_[{exit, lp.state[k].name}] = held_.at(state[k].value);
  for (auto& o : lp.outputs) {
    const InputLink& l = exit_link(o);
    held_[{exit, o}] = held_.at({l.from, l.from_port});
  }
}

std::vector<HeldReport> PlanRunner::held() const {
  std::vector<HeldReport> out;
  for (auto& [name, h] : held_report_) out.push_back(h);
  return out;
}

void PlanRunner::add_metrics(const StageMetrics& m) {
  auto [it, fresh] = metrics_.try_emplace(m.id, m);
  if (fresh) return;
  StageMetrics& t = it->second;
  t.items_in += m.items_in;
  t.items_out += m.items_out;
  t.wall_s += m.wall_s;
  t.device_s += m.device_s;
  if (m.busy_from >= 0 && (t.busy_from < 0 || m.busy_from < t.busy_from)) t.busy_from = m.busy_from;
  t.busy_to = std::max(t.busy_to, m.busy_to);
  t.last_output_s = std::max(t.last_output_s, m.last_output_s);
  if (m.device_from >= 0 && (t.device_from < 0 || m.device_from < t.device_from)) t.device_from = m.device_from;
  t.device_to = std::max(t.device_to, m.device_to);
  t.work.visibilities += m.work.visibilities;
  t.work.updates += m.work.updates;
  t.work.bytes_h2d += m.work.bytes_h2d;
  t.work.bytes_d2h += m.work.bytes_d2h;
}

std::vector<StageMetrics> PlanRunner::metrics() const {
  std::vector<StageMetrics> out;
  for (auto& s : plan().stages)
    if (auto it = metrics_.find(s.id); it != metrics_.end()) out.push_back(it->second);
  return out;
}

void PlanRunner::progress(ProgressLine& line, double since_start) {
  std::lock_guard lk(nodes_m_);
  line.update(since_start, nodes_);
}

}  // namespace uvflow
