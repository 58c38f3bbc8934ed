// transfer.to_device / transfer.to_host: the explicit host<->device crossings. The planner inserts
// them where a host output feeds a device input (run.transfers: auto) and prints each one; with
// run.transfers: explicit a pipeline must list them itself. Their ports carry any payload type
// (kAnyPayload), which a typed In<T>/Out<T> cannot say: they are declared as PortSpecs.
#pragma once

#include <string>

#include "runtime/stage_decl.hpp"

namespace uvflow::transfer {

inline constexpr const char* kPort = "data";  // the one input and the one output

struct Params {};

// One direction's declaration: the payload, of any type, from `from` memory to `to` memory, with
// the shape of its items unchanged.
inline StageDecl<Params> declare(std::string type, std::string summary, Residency from, Residency to) {
  return {
      .type = std::move(type),
      .summary = std::move(summary),
      .doc = "Every array of the payload is copied on the stage's CUDA stream; the copy is ordered after the "
             "payload's last writer and later readers wait on its event. Bytes moved are counted in the run "
             "report. Inserted by the planner where needed unless run.transfers is explicit.",
      .inputs = {PortSpec{kPort, kAnyPayload, Arity::stream, from, "payload to copy"}},
      .outputs = {PortSpec{kPort, kAnyPayload, Arity::stream, to, "the same payload at its new location"}},
      .concurrency = Concurrency::serial,
      .describe = [](const Params&, const PortShapes& in) {
        auto it = in.find(kPort);
        return it == in.end() ? PortShapes{} : PortShapes{{kPort, it->second}};
      },
  };
}

}  // namespace uvflow::transfer

namespace uvflow::transfer_to_device {
inline const auto decl = transfer::declare(
    "transfer.to_device", "copy a payload from host to device memory (one asynchronous upload)", Residency::host,
    Residency::device);
StageSpec spec();  // backend: cuda only
}  // namespace uvflow::transfer_to_device

namespace uvflow::transfer_to_host {
inline const auto decl = transfer::declare(
    "transfer.to_host", "copy a payload from device to pinned host memory (one asynchronous download)",
    Residency::device, Residency::host);
StageSpec spec();  // backend: cuda only
}  // namespace uvflow::transfer_to_host
