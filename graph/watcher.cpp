#include "graph/watcher.hpp"

namespace uvflow {

void Watcher::start() {
  thread_ = std::thread([this] { loop(); });
  dropper_ = std::thread([this] { drop_loop(); });
}

void Watcher::after(std::vector<device::Event> evs, std::function<void()> fn) {
  g_.reserve_wait();
  {
    std::lock_guard lk(m_);
    q_.push_back({std::move(evs), std::move(fn)});
  }
  cv_.notify_one();
}

void Watcher::stop() {
  {
    std::lock_guard lk(m_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lk(m_);
    stop_dropping_ = true;
  }
  drop_cv_.notify_one();
  if (dropper_.joinable()) dropper_.join();
}

void Watcher::loop() {
  for (;;) {
    Job j;
    {
      std::unique_lock lk(m_);
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;
      j = std::move(q_.front());
      q_.pop_front();
    }
    try {
      for (auto& e : j.evs) e.synchronize();
      j.fn();
    } catch (...) {
      if (on_error) on_error(std::current_exception());
    }
    {
      std::lock_guard lk(m_);
      done_.push_back(std::move(j));
    }
    drop_cv_.notify_one();
  }
}

void Watcher::drop_loop() {
  for (;;) {
    Job j;
    {
      std::unique_lock lk(m_);
      drop_cv_.wait(lk, [&] { return stop_dropping_ || !done_.empty(); });
      if (done_.empty()) return;
      j = std::move(done_.front());
      done_.pop_front();
    }
    j = {};  // drop what the job kept alive before releasing the graph
    g_.release_wait();
  }
}

}  // namespace uvflow
