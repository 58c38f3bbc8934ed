// Mapping a Plan onto oneTBB flow graphs: the environment checks, the device pools, then the run
// itself (graph/plan_runner: one graph, or one per loop cycle and per part around the loops, each
// with one StageNode per stage and a watcher thread for device work), Ctrl-C polling and the
// progress line, and at the end the report.
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

#include "graph/plan_runner.hpp"
#include "graph/preflight.hpp"
#include "graph/progress.hpp"
#include "graph/ranks.hpp"
#include "graph/run_state.hpp"
#include "graph/stage_node.hpp"
#include "graph/watcher.hpp"
#include "runtime/dist.hpp"
#include "runtime/pinned_pool.hpp"

namespace uvflow {
namespace {

class Executor {
 public:
  Executor(const Plan& plan, const ExecOptions& opts) : plan_(plan), opts_(opts) {}
  RunReport run();

 private:
  void monitor_loop();  // polls Ctrl-C and draws the progress line until the run is done
  void gather_ranks(RunReport& r);

  const Plan& plan_;
  ExecOptions opts_;
  RunState run_{plan_};
  PlanRunner runner_{run_};
  bool has_cuda_ = false;
  std::atomic<bool> done_{false};
};

// A distributed run: every rank's report to rank 0, then a barrier. A rank that failed has ended
// the job (cli), so a rank past the barrier knows that every rank succeeded, and only then commits
// its outputs: no rank leaves files from a run that failed elsewhere.
void Executor::gather_ranks(RunReport& r) {
  r.rank = dist::rank();
  r.local_rank = dist::local_rank();
  r.communication_s = dist::communication_seconds();
  if (dist::size() == 1) return;
  for (auto& text : dist::gather(report_json(r))) r.ranks.push_back(report_from_json(text));
  dist::barrier();
}

void Executor::monitor_loop() {
  ProgressLine progress(opts_.progress);
  while (!done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (int sig = interrupt_signal()) run_.fail(std::make_exception_ptr(Interrupted(sig)));
    runner_.progress(progress, run_.since_start());
  }
  // A run over before this thread first looked (a short one, a loaded machine) is interrupted all the same.
  if (int sig = interrupt_signal()) run_.fail(std::make_exception_ptr(Interrupted(sig)));
  progress.clear();
}

RunReport Executor::run() {
  std::unique_ptr<tbb::global_control> threads;
  if (plan_.run.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                    size_t(plan_.run.threads));
  for (auto& st : plan_.stages) has_cuda_ = has_cuda_ || st.backend == "cuda";
  if (auto env = device_problems(plan_); !env.empty()) throw ConfigError(env);
  // One rank per GPU: each rank of a node takes the next of its devices (round robin). A single
  // process keeps CUDA's default, cuda:0.
  if (has_cuda_ && dist::size() > 1) device::use(device::for_local_rank(dist::local_rank(), device::count()));
  run_.device_name = has_cuda_ ? device::describe(device::current()) : "host";
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
  // The report's temporary first: a report that cannot be written fails the run before it computes.
  const std::filesystem::path report_tmp = opts_.report.empty() ? std::filesystem::path() : run_.files.temp_for(opts_.report);
  run_.t0 = Clock::now();
  std::thread monitor([this] { monitor_loop(); });
  runner_.run();
  done_ = true;
  monitor.join();
  RunReport r;
  r.pipeline = plan_.name;
  r.file = plan_.file.string();
  for (auto& c : plan_.choices) r.choices.push_back({c.id, c.chosen, c.automatic, c.why});
  r.device = run_.device_name;
  r.wall_s = run_.since_start();
  r.stream_start_s = runner_.stream_start_s();
  r.stages = runner_.metrics();
  r.loops = runner_.loops();
  r.held = runner_.held();
  if (run_.failed) {
    run_.files.rollback();
    std::rethrow_exception(run_.first_error);
  }
  gather_ranks(r);
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
  // spdlog's registry is made on first use: here, before any worker thread logs (TSan saw the
  // first use race in a stage's worker with the main thread's reading of the default logger).
  spdlog::default_logger_raw();
  if (dist::rank() != 0) {
    // The report is rank 0's (with every rank's table); this rank runs its part of the plan.
    const Plan mine = plan_for_rank(plan, dist::rank());
    Executor ex(mine, ExecOptions{.progress = false, .report = ""});
    return ex.run();
  }
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
