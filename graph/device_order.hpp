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
  // in_span: false for a start or end-of-stream call that emitted nothing. Its events (there is
  // usually no work between them) complete when the host records them, which may be long after
  // the stage's work and after its consumers' work began (seen on the H100 as a correction
  // "ending" 34-50+ us after the download of its image had started), so they stay out of span().
  void add(device::Event start, device::Event end, bool in_span = true);
  double seconds() const;  // of the calls whose events have completed
  // The first start and the last end of the completed calls in the span (of all of them when
  // none is), in seconds after `origin` (an event with timing) plus `origin_s`; false when no call
  // has completed.
  bool span(const device::Event& origin, double origin_s, double& from, double& to) const;

 private:
  struct Call {
    device::Event start, end;
    bool in_span;
  };
  mutable std::mutex m_;
  std::vector<Call> calls_;
};

}  // namespace uvflow
