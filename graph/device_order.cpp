#include "graph/device_order.hpp"

#include <algorithm>

namespace uvflow {

void order_after_inputs(const PayloadMap& inputs, const device::Stream& s) {
  for (auto& [_, p] : inputs) wait_for_device_input(*p, s);
}

void stamp_call(const device::Stream& s, const PayloadMap& stream_inputs, const Outbox& outbox,
                const Tokens& tokens, Watcher& watcher) {
  device::Event done = s.record();
  std::vector<const Payload*> in, out;
  std::vector<std::shared_ptr<const Payload>> keep;
  for (auto& [_, p] : stream_inputs) {
    in.push_back(p.get());
    keep.push_back(p);
  }
  for (auto& [_, p] : outbox) out.push_back(p.get());
  stamp_device_use(in, out, done);
  for (auto& t : tokens) t->add_pending(done);
  // Host memory the device is still copying from must outlive the copy.
  watcher.after({done}, [keep = std::move(keep)] {});
}

void DeviceTimes::add(device::Event start, device::Event end, bool in_span) {
  std::lock_guard lk(m_);
  calls_.push_back({std::move(start), std::move(end), in_span});
}

double DeviceTimes::seconds() const {
  std::lock_guard lk(m_);
  double s = 0;
  for (auto& c : calls_)
    if (c.start.ready() && c.end.ready()) s += c.end.elapsed_since(c.start) / 1e3;
  return s;
}

bool DeviceTimes::span(const device::Event& origin, double origin_s, double& from, double& to) const {
  std::lock_guard lk(m_);
  bool any = false;
  for (const bool all : {false, true}) {
    for (auto& c : calls_) {
      if (!c.start.ready() || !c.end.ready() || !(all || c.in_span)) continue;
      const double s = origin_s + c.start.elapsed_since(origin) / 1e3, e = origin_s + c.end.elapsed_since(origin) / 1e3;
      from = any ? std::min(from, s) : s;
      to = any ? std::max(to, e) : e;
      any = true;
    }
    if (any) break;
  }
  return any;
}

}  // namespace uvflow
