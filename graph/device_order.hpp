// Device work of a cuda stage: it enqueues on its own stream and returns. Its stream first waits
// for the writers of its device inputs; afterwards its outputs carry the event of the work
// (consumers' streams wait on it), the in-flight tokens of the item wait for it, and the host
// inputs a copy reads from outlive it.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include "graph/tokens.hpp"
#include "graph/watcher.hpp"
#include "runtime/stage_context.hpp"

namespace uvflow {

// Orders the work enqueued next on `s` after the last writers of every device input.
void order_after_inputs(const PayloadMap& inputs, const device::Stream& s);

// After a call has enqueued its work on `s`: stamps its event on the call's stream inputs and
// outputs, makes the item's tokens wait for it, and keeps the inputs alive until it completes.
void stamp_call(const device::Stream& s, const PayloadMap& stream_inputs, const Outbox& outbox,
                const Tokens& tokens, Watcher& watcher);

// The events around each call of a stage; their elapsed times are its device time.
class DeviceTimes {
 public:
  void add(device::Event start, device::Event end);
  double seconds() const;  // of the calls whose events have completed
  // The first start and the last end of the completed calls, in seconds after `origin` (an event
  // with timing) plus `origin_s`; false when no call has completed. Calls that enqueued no work
  // (under 2 us between their events: an empty finish()) are left out unless all are: such a
  // pair completes when the host records it, which may be long after the stage's work and after
  // its consumers' work began (seen on the H100 as a correction "ending" 34-50+ us after the
  // download of its image had started).
  bool span(const device::Event& origin, double origin_s, double& from, double& to) const;

 private:
  mutable std::mutex m_;
  std::vector<std::pair<device::Event, device::Event>> events_;
};

}  // namespace uvflow
