// What flows along the edges of a pipeline: small typed structs holding reference-counted arrays
// plus metadata. The framework moves payloads between host and device (transfers the planner
// inserts) and stamps device events on them without knowing their concrete type.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "runtime/buffer.hpp"

namespace uvflow {

class Payload {
 public:
  virtual ~Payload() = default;
  // The type name ports declare ("VisBlock", "Grid", ...).
  virtual std::string_view type() const = 0;
  virtual std::shared_ptr<Payload> clone() const = 0;
  // Every array the payload holds; transfers and event stamping go through this.
  virtual void arrays(const std::function<void(ArrayBase&)>& f) = 0;
  // Arrays that stay in host memory wherever the payload goes (transfers leave them: a
  // VisBlock's Measurement Set rows). With arrays(), everything the payload holds: what a held
  // stream's scratch file (runtime/spill.hpp) writes and reads back.
  virtual void host_arrays(const std::function<void(ArrayBase&)>& f) = 0;

  // Where the data lives: device if any array is on the device.
  Location location() const;
  std::size_t bytes() const;
  // A copy with every array at `to`, copies enqueued on `s`.
  std::shared_ptr<Payload> moved_to(Location to, const device::Stream& s, bool pinned) const;
};

// Implements the boilerplate of Payload for a struct that lists its arrays in
// `template <class F> void each_array(F&& f)`, and those that stay on the host, if any, in
// `template <class F> void each_host_array(F&& f)`.
template <class Derived, const char* Name>
class PayloadOf : public Payload {
 public:
  static constexpr std::string_view type_name = Name;
  std::string_view type() const override { return Name; }
  std::shared_ptr<Payload> clone() const override {
    return std::make_shared<Derived>(static_cast<const Derived&>(*this));
  }
  void arrays(const std::function<void(ArrayBase&)>& f) override {
    static_cast<Derived*>(this)->each_array([&](ArrayBase& a) { f(a); });
  }
  void host_arrays(const std::function<void(ArrayBase&)>& f) override {
    auto visit = [&](ArrayBase& a) { f(a); };
    if constexpr (requires(Derived& d) { d.each_host_array(visit); })
      static_cast<Derived*>(this)->each_host_array(visit);
  }
};

// After one call of a stage whose device work ends at `done`: every device array of its inputs was
// read until `done` (its memory is not released before), and every device array of its outputs
// was written by it, except arrays of its inputs passed on unchanged, which keep their writer.
// The executor calls this after each invocation of a cuda stage, the one-stage harness likewise.
void stamp_device_use(const std::vector<const Payload*>& inputs, const std::vector<const Payload*>& outputs,
                      const device::Event& done);

// Whether any array of `p` is in device memory.
bool has_device_array(const Payload& p);
// Before a call of a stage: work later queued on `s` waits for the last writer of every device
// array of `input`.
void wait_for_device_input(const Payload& input, const device::Stream& s);

}  // namespace uvflow
