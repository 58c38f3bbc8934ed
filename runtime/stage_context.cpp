#include "runtime/stage_context.hpp"

#include <algorithm>

namespace uvflow {

void WorkCounters::add(const Work& w) {
  std::lock_guard lk(m_);
  host_.visibilities += w.visibilities;
  host_.updates += w.updates;
  host_.bytes_h2d += w.bytes_h2d;
  host_.bytes_d2h += w.bytes_d2h;
}

void WorkCounters::add_on_device(Array<double> counters) {
  std::lock_guard lk(m_);
  device_.push_back(std::move(counters));
}

Work WorkCounters::host() const {
  std::lock_guard lk(m_);
  return host_;
}

Work WorkCounters::total(const device::Stream& s) const {
  std::lock_guard lk(m_);
  Work w = host_;
  if (device_.empty()) return w;
  const Work d = read_device_work(device_, s);
  w.visibilities += d.visibilities;
  w.updates += d.updates;
  return w;
}

void WorkCounters::fold_device(const device::Stream& s) {
  std::lock_guard lk(m_);
  if (device_.empty()) return;
  const Work d = read_device_work(device_, s);
  host_.visibilities += d.visibilities;
  host_.updates += d.updates;
  device_.clear();
}

bool StageContext::connected(std::string_view port) const {
  return std::find(s_.connected.begin(), s_.connected.end(), port) != s_.connected.end();
}

std::shared_ptr<const Payload> StageContext::input(std::string_view port) const {
  if (auto it = inputs_.find(port); it != inputs_.end()) return it->second;
  if (!s_.spec.input(port)) throw std::logic_error("stage has no input port '" + std::string(port) + "'");
  return nullptr;
}

void StageContext::emit(std::string_view port, std::shared_ptr<Payload> p) {
  if (!s_.spec.output(port)) throw std::logic_error("stage has no output port '" + std::string(port) + "'");
  if (!p) throw std::logic_error("emitted a null payload on '" + std::string(port) + "'");
  outbox.emplace_back(std::string(port), std::move(p));
}

const device::Stream& StageContext::stream() {
  if (!s_.stream.valid())
    throw std::logic_error("stage has no CUDA stream (backend " + s_.backend + ")");
  return s_.stream;
}

}  // namespace uvflow
