// Bounded execution: every source item carries a token, a permit to be in flight (run.max_in_flight,
// a limiter_node per source). Everything derived from the item holds the token; the limiter is
// released when the last holder is gone and any device work on the item has completed.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "graph/watcher.hpp"
#include "runtime/device.hpp"

namespace uvflow {

class Token {
 public:
  // `alive` false: the run is over and there is nothing left to release. `w` null: no device work.
  Token(std::function<void()> release, Watcher* w, std::shared_ptr<std::atomic<bool>> alive)
      : release_(std::move(release)), watcher_(w), alive_(std::move(alive)) {}
  ~Token();
  // Device work on the item: the permit is released only once `e` has completed.
  void add_pending(device::Event e);

 private:
  std::function<void()> release_;
  Watcher* watcher_;
  std::shared_ptr<std::atomic<bool>> alive_;
  std::mutex m_;
  std::vector<device::Event> pending_;
};
using Tokens = std::vector<std::shared_ptr<Token>>;

}  // namespace uvflow
