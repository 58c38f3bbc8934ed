// The one list of built-in stages: adding a stage means adding its spec here.
#include "runtime/registry.hpp"
#include "stages/io/write_fits.hpp"
#include "stages/io/write_png.hpp"
#include "stages/transfer/transfer.hpp"

namespace uvflow {

void register_builtin_stages(Registry& r) {
  r.add(transfer_to_device_spec());
  r.add(transfer_to_host_spec());
  r.add(write_fits_spec());
  r.add(write_png_spec());
}

}  // namespace uvflow
