// What one graph hands on to a later one (graph/plan_runner): a loop reads its data every cycle,
// so the data is held for the whole loop. Memory stays bounded however large the data: a stream's
// items stay in memory where they were made (host or device) while the run's budget for that
// memory allows (run.hold_memory_mb, run.hold_device_mb), and the rest go to a scratch file of
// their output (runtime/spill.hpp), read back one item at a time as a later graph streams them.
// Once items (an image, a kernel stack) are used whole, so they always stay, and count against
// the budget.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "graph/pipeline.hpp"
#include "runtime/spill.hpp"

namespace uvflow {

// One held item: in memory where it was made, with its share of the budget (given back when its
// last copy goes); a device item past the device budget, in host memory (a pinned copy, charged to
// the host budget); or in a scratch file.
class HeldItem {
 public:
  HeldItem() = default;
  // In memory, outside the budget (a loop's own small values: its CycleControl).
  explicit HeldItem(std::shared_ptr<const Payload> p) : payload_(std::move(p)) {}
  // The payload where it was made: a spilled one read back, a host copy's device arrays copied back
  // to the device (a fresh copy each call, the copy its arrays' last writer).
  std::shared_ptr<const Payload> get() const;
  bool spilled() const { return entry_ != nullptr; }
  bool on_host() const { return !upload_.empty(); }

 private:
  friend class HoldBudget;
  std::shared_ptr<const Payload> payload_;
  std::vector<bool> upload_;  // a host copy: which of its arrays() were on the device
  std::shared_ptr<const void> charge_;
  std::shared_ptr<const SpillFile> file_;
  std::shared_ptr<const SpillFile::Entry> entry_;
};

// What the budget keeps per held output: its scratch file, once it has one.
struct HeldOutput {
  std::shared_ptr<SpillFile> file;
};

class HoldBudget {
 public:
  explicit HoldBudget(const RunOptions& run);

  // `p`, one item of the output `what`, held: in memory when it is a once item or both budgets take
  // its bytes; else, for a device item whose bytes the host budget takes too, as a host copy; else
  // appended to `out`'s scratch file (made in the scratch directory on the output's first spill).
  // Calls for one `out` must not overlap. Throws std::runtime_error when the scratch file cannot be
  // made or written.
  HeldItem hold(std::shared_ptr<const Payload> p, Arity arity, HeldOutput& out, const std::string& what);

  // True the first time `what` is asked: the log says once per output and run where its items go,
  // though a loop holds its state anew every cycle.
  bool first_time(const std::string& what);

  std::size_t limit(Location l) const { return limit_[int(l)]; }
  std::size_t used(Location l) const { return used_[int(l)].load(); }

 private:
  std::size_t limit_[2];
  std::atomic<std::size_t> used_[2] = {0, 0};
  std::filesystem::path scratch_dir_;
  std::mutex said_m_;
  std::set<std::string> said_;
};

}  // namespace uvflow
