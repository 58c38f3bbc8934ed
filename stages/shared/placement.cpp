#include "stages/shared/placement.hpp"

#include <cstdint>
#include <string>

#include "runtime/error.hpp"

namespace uvflow {

Placement Placement::of(const KernelStack& ks) {
  Placement p{ks.geom.scale(), ks.w_scale, ks.geom.grid_size, ks.planes, ks.oversample};
  auto bad = [](const std::string& why) { throw InputError("kernel stack: " + why); };
  if (p.grid_size <= 0 || p.grid_size % 2) bad("grid_size must be even and positive, is " + std::to_string(p.grid_size));
  if (!(ks.geom.cell_rad > 0 && std::isfinite(ks.geom.cell_rad)))
    bad("cell_rad must be finite and positive, is " + std::to_string(ks.geom.cell_rad));
  // GridCoord holds the offsets in 8 bits and the plane and support in 16.
  if (p.oversample < 2 || p.oversample % 2 || p.oversample > 254)
    bad("oversample must be even, in [2, 254], is " + std::to_string(p.oversample));
  if (p.planes < 1 || p.planes > INT16_MAX) bad("planes must be in [1, 32767], is " + std::to_string(p.planes));
  if (std::int64_t(ks.support.size()) != p.planes)
    bad("support has " + std::to_string(ks.support.size()) + " values for " + std::to_string(p.planes) + " planes");
  if (!(p.w_scale >= 0 && std::isfinite(p.w_scale))) bad("w_scale must be finite and >= 0, is " + std::to_string(p.w_scale));
  // The supports are checked where they are readable; a device stack's were checked on the host.
  if (ks.support.location() == Location::host)
    for (int i = 0; i < p.planes; ++i)
      if (ks.support[i] < 0 || 2 * std::int64_t(ks.support[i]) + 1 > p.grid_size || ks.support[i] > INT16_MAX)
        bad("support of plane " + std::to_string(i) + " is " + std::to_string(ks.support[i]) + ", the grid has " +
            std::to_string(p.grid_size) + " cells");
  return p;
}

}  // namespace uvflow
