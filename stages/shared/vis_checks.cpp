#include "stages/shared/vis_checks.hpp"

#include <string>

#include "runtime/error.hpp"

namespace uvflow {

void check_arrays(const VisBlock& b) {
  auto check = [&](const ArrayBase& a, const char* name) {
    if (a.size() != b.size())
      throw InputError("block " + std::to_string(b.index) + ": " + name + " has " + std::to_string(a.size()) + " values for " +
                       std::to_string(b.size()) + " visibilities");
  };
  check(b.uu, "uu");
  check(b.vv, "vv");
  check(b.ww, "ww");
  check(b.weight, "weight");
}

void check_placed(const VisBlock& b) {
  if (!b.placed())
    throw InputError("block " + std::to_string(b.index) + " is not placed (coords has " + std::to_string(b.coords.size()) +
                     " entries for " + std::to_string(b.size()) + " visibilities): feed it through uvw.w_sort first");
}

}  // namespace uvflow
