// The one list of built-in stages: adding a stage means adding its spec here.
#include "runtime/registry.hpp"
#include "stages/transfer/transfer.hpp"

namespace uvflow {

void register_builtin_stages(Registry& r) {
  r.add(transfer_to_device_spec());
  r.add(transfer_to_host_spec());
}

}  // namespace uvflow
