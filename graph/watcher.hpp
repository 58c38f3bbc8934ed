// The device watcher: a thread that waits on device events and then runs a continuation (hand on
// a download, release an in-flight token), so TBB workers never block on the GPU. What a job kept
// alive (host memory a copy read, a block's host-side labels) is dropped by a second thread: freeing
// large host arrays takes milliseconds (on el56-82, 6 to 12 ms a block for its labels), and in the
// watcher's queue it held the image download's hand-off up to 19 ms after the copy had landed.
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
  void drop_loop();
  tbb::flow::graph& g_;
  std::thread thread_, dropper_;
  std::mutex m_;
  std::condition_variable cv_, drop_cv_;
  std::deque<Job> q_, done_;  // waiting on their events; run, to be dropped
  bool stop_ = false, stop_dropping_ = false;
};

}  // namespace uvflow
