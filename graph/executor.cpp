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

#include "graph/preflight.hpp"
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
    if (int sig = interrupt_signal()) run_.fail(std::make_exception_ptr(Interrupted(sig)));
    progress.update(run_.since_start(), nodes_);
  }
  progress.clear();
}

RunReport Executor::run() {
  std::unique_ptr<tbb::global_control> threads;
  if (plan_.run.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                    size_t(plan_.run.threads));
  for (auto& st : plan_.stages) has_cuda_ = has_cuda_ || st.backend == "cuda";
  if (auto env = device_problems(plan_); !env.empty()) throw ConfigError(env);
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
  // The report's temporary first: a report that cannot be written fails the run before it computes.
  const std::filesystem::path report_tmp = opts_.report.empty() ? std::filesystem::path() : run_.files.temp_for(opts_.report);
  run_.t0 = Clock::now();
  for (auto& st : plan_.stages) {
    try {
      CrashScope scope(("stage '" + st.id + "' (backend " + st.backend + ", setup)").c_str());
      nodes_.push_back(std::make_unique<StageNode>(run_, st, st.spec->backend(st.backend)->make()));
    } catch (const InputError& e) {
      throw StageError(st.id, st.backend, "", StageError::kSetup, std::string("prepare: ") + e.what(), ExitCode::input);
    } catch (const std::exception& e) {
      throw StageError(st.id, st.backend, "", StageError::kSetup, "prepare: " + error_text(e), ExitCode::runtime);
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
  watcher_.stop();
  // The report lists the outputs it is committed with (a failure here leaves the temporaries to
  // RunState's OutputFiles, which removes them).
  if (!report_tmp.empty()) {
    for (auto& f : run_.files.finals())
      if (f != opts_.report) r.outputs.push_back(f.string());
    OutputFiles::write_text(report_tmp, opts_.report, report_json(r));
  }
  r.outputs.clear();
  for (auto& f : run_.files.commit())
    if (f != opts_.report) r.outputs.push_back(f.string());
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
      prepare_dry(plan, st);
    } catch (const std::exception& e) {
      diags.push_back({st.pos, "stage '" + st.id + "' (" + st.spec->type + "): " + e.what()});
    }
  }
  if (!diags.empty()) throw ConfigError(diags);
}

}  // namespace uvflow
