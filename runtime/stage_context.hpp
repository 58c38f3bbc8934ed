// The one implementation of Context. A pipeline run (graph/executor) and the one-stage harness
// (runtime/harness) both serve a stage through it, so a stage meets the same port checks, work
// counting and output-file handling in a unit test as in a run.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/output_files.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

using PayloadMap = std::map<std::string, std::shared_ptr<const Payload>, std::less<>>;
using Outbox = std::vector<std::pair<std::string, std::shared_ptr<Payload>>>;

// A stage's work counters (Context::add_work, add_work_on_device); concurrent calls may add.
class WorkCounters {
 public:
  void add(const Work& w);
  void add_on_device(Array<double> counters);
  Work host() const;  // what was added on the host (and folded in)
  // host() plus the device counters, read back on `s` after the work queued on it (no wait when
  // there are none).
  Work total(const device::Stream& s) const;
  // After the stage's last device work: the device counters become part of host(), once.
  void fold_device(const device::Stream& s);

 private:
  mutable std::mutex m_;
  Work host_;
  std::vector<Array<double>> device_;
};

// What every call of one stage shares.
struct StageState {
  StageState(const StageSpec& s, std::string stage_id, std::string stage_backend, OutputFiles& out)
      : spec(s), id(std::move(stage_id)), backend(std::move(stage_backend)), files(out) {}
  const StageSpec& spec;
  std::string id, backend;
  std::vector<std::string> connected;            // input ports that have a producer
  device::Stream stream;                         // cuda backends; invalid otherwise
  WorkCounters work;
  OutputFiles& files;
  const std::atomic<bool>* cancelled = nullptr;  // set when the run fails or is interrupted
};

// The Context of one call (an item, start() or finish()). `inputs` holds the call's stream inputs
// and the stage's once inputs; what the stage emits is collected in `outbox` for the caller to
// hand on.
class StageContext final : public Context {
 public:
  StageContext(StageState& s, std::int64_t item, PayloadMap inputs)
      : s_(s), item_(item), inputs_(std::move(inputs)) {}
  const std::string& stage_id() const override { return s_.id; }
  const std::string& backend() const override { return s_.backend; }
  std::int64_t item() const override { return item_; }
  bool connected(std::string_view port) const override;
  std::shared_ptr<const Payload> input(std::string_view port) const override;
  void emit(std::string_view port, std::shared_ptr<Payload> p) override;
  const device::Stream& stream() override;
  void add_work(const Work& w) override { s_.work.add(w); }
  void add_work_on_device(Array<double> counters) override { s_.work.add_on_device(std::move(counters)); }
  std::filesystem::path output_file(const std::filesystem::path& final_path) override {
    return s_.files.temp_for(final_path);
  }
  bool cancelled() const override { return s_.cancelled && s_.cancelled->load(); }

  Outbox outbox;

 private:
  StageState& s_;
  std::int64_t item_;
  PayloadMap inputs_;
};

}  // namespace uvflow
