// The device watcher: a thread that waits on device events and then runs a continuation (hand on
// a download, release an in-flight token, drop host memory a copy read), so TBB workers never
// block on the GPU.
#pragma once

#include <oneapi/tbb/flow_graph.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/device.hpp"

namespace uvflow {

class Watcher {
 public:
  explicit Watcher(tbb::flow::graph& g) : g_(g) {}
  ~Watcher() { stop(); }
  void start();
  // Called from graph tasks: keeps wait_for_all() from returning until `fn` has run.
  void after(std::vector<device::Event> evs, std::function<void()> fn);
  void stop();
  std::function<void(std::exception_ptr)> on_error;  // a wait or a continuation threw

 private:
  struct Job {
    std::vector<device::Event> evs;
    std::function<void()> fn;
  };
  void loop();
  tbb::flow::graph& g_;
  std::thread thread_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> q_;
  bool stop_ = false;
};

}  // namespace uvflow
