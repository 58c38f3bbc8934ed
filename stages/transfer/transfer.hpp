// transfer.to_device / transfer.to_host: the explicit host<->device crossings. The planner inserts
// them where a host output feeds a device input (run.transfers: auto) and prints each one; with
// run.transfers: explicit a pipeline must list them itself. Their ports carry any payload type
// (kAnyPayload), which a typed In<T>/Out<T> cannot say: they are declared as PortSpecs.
#pragma once

#include "runtime/stage_decl.hpp"

namespace uvflow::transfer_to_device {

inline const PortSpec in_data{"data", kAnyPayload, Arity::stream, Residency::host, "payload to copy"};
inline const PortSpec out_data{"data", kAnyPayload, Arity::stream, Residency::device,
                               "the same payload at its new location"};

struct Params {};

inline const StageDecl<Params> decl{
    .type = "transfer.to_device",
    .summary = "copy a payload from host to device memory (one asynchronous upload)",
    .doc = "Every array of the payload is copied on the stage's CUDA stream; the copy is ordered after the "
           "payload's last writer and later readers wait on its event. Bytes moved are counted in the run "
           "report. Inserted by the planner where needed unless run.transfers is explicit.",
    .inputs = {in_data},
    .outputs = {out_data},
    .concurrency = Concurrency::serial,
};

StageSpec spec();  // backend: cuda only

}  // namespace uvflow::transfer_to_device

namespace uvflow::transfer_to_host {

inline const PortSpec in_data{"data", kAnyPayload, Arity::stream, Residency::device, "payload to copy"};
inline const PortSpec out_data{"data", kAnyPayload, Arity::stream, Residency::host,
                               "the same payload at its new location"};

struct Params {};

inline const StageDecl<Params> decl{
    .type = "transfer.to_host",
    .summary = "copy a payload from device to pinned host memory (one asynchronous download)",
    .doc = "Every array of the payload is copied on the stage's CUDA stream; the copy is ordered after the "
           "payload's last writer and later readers wait on its event. Bytes moved are counted in the run "
           "report. Inserted by the planner where needed unless run.transfers is explicit.",
    .inputs = {in_data},
    .outputs = {out_data},
    .concurrency = Concurrency::serial,
};

StageSpec spec();  // backend: cuda only

}  // namespace uvflow::transfer_to_host
