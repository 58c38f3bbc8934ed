// transfer.to_device / transfer.to_host: the explicit host<->device crossings. The planner inserts
// them where a host output feeds a device input (run.transfers: auto) and prints each one; with
// run.transfers: explicit a pipeline must list them itself.
//
//   transfer.to_device   in  data: any payload, host      out data: same payload, device
//   transfer.to_host     in  data: any payload, device    out data: same payload, host (pinned)
//   backend: cuda only; no parameters.
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec transfer_to_device_spec();
StageSpec transfer_to_host_spec();

}  // namespace uvflow
