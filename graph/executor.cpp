// Mapping a Plan onto a oneTBB flow graph: the environment checks, the device pools, one
// StageNode per stage (graph/stage_node), then the run itself with its watcher thread (device
// work, graph/device_order), Ctrl-C polling and progress line, and at the end the report.
//
// Failure: the first exception cancels the graph and is reported once; Ctrl-C takes the same path;
// output files are committed only after a successful run.
#include "graph/executor.hpp"

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "graph/progress.hpp"
#include "graph/run_state.hpp"
#include "graph/stage_node.hpp"
#include "graph/watcher.hpp"
#include "runtime/pinned_pool.hpp"

namespace uvflow {
namespace {

class Executor {
 public:
  Executor(const Plan& plan, const ExecOptions& opts) : plan_(plan), opts_(opts) {}
  RunReport run();

 private:
  void monitor_loop();  // polls Ctrl-C and draws the progress line until the run is done

  const Plan& plan_;
  ExecOptions opts_;
  tbb::flow::graph g_;
  Watcher watcher_{g_};
  RunState run_{plan_, g_};
  bool has_cuda_ = false;
  std::vector<std::unique_ptr<StageNode>> nodes_;
  std::atomic<bool> done_{false};
};

void Executor::monitor_loop() {
  ProgressLine progress(opts_.progress);
  while (!done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (interrupt_requested()) run_.fail(std::make_exception_ptr(Interrupted()));
    progress.update(run_.since_start(), nodes_);
  }
  progress.clear();
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
  run_.device_name = has_cuda_ ? device::describe(0) : "host";
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
    watcher_.on_error = [this](std::exception_ptr e) { run_.fail(e); };
    watcher_.start();
    run_.watcher = &watcher_;
  }
  run_.t0 = Clock::now();
  for (auto& st : plan_.stages) {
    try {
      nodes_.push_back(std::make_unique<StageNode>(run_, st, st.spec->backend(st.backend)->make()));
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
  const double stream_start_s = run_.since_start();
  if (!run_.failed)
    for (auto& n : nodes_) n->activate();
  g_.wait_for_all();
  if (has_cuda_) {
    for (auto& n : nodes_) {
      try {
        n->sync_device();
        if (!run_.failed) n->collect_device_work();
      } catch (...) {
        run_.fail(std::current_exception());
      }
    }
  }
  done_ = true;
  monitor.join();
  if (!run_.failed) {
    for (auto& n : nodes_)
      if (!n->finished()) {
        auto w = n->waiting_for();
        run_.fail(std::make_exception_ptr(StageError(n->inst().id, n->inst().backend, "", -1,
                                                     "never finished" + (w.empty() ? std::string() : ": still waiting for " + w),
                                                     ExitCode::internal)));
        break;
      }
  }
  RunReport r;
  r.pipeline = plan_.name;
  r.file = plan_.file.string();
  r.device = run_.device_name;
  r.wall_s = run_.since_start();
  r.stream_start_s = stream_start_s;
  for (auto& n : nodes_) r.stages.push_back(n->metrics());
  run_.alive->store(false);
  if (run_.failed) {
    run_.files.rollback();
    watcher_.stop();
    std::rethrow_exception(run_.first_error);
  }
  for (auto& f : run_.files.commit()) r.outputs.push_back(f.string());
  watcher_.stop();
  return r;
}

}  // namespace

RunReport run_plan(const Plan& plan, const ExecOptions& opts) {
  // An interrupt that arrives before the run starts cancels it; the flag is cleared when the run
  // ends, so a later run in the same process starts clean.
  struct ClearInterrupt {
    ~ClearInterrupt() { clear_interrupt(); }
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

}  // namespace uvflow
