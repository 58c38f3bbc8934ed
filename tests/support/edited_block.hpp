// A copy of a visibility block with one visibility's value and weight replaced (the input is left
// as it was): for the tests of what gridders make of bad values.
#pragma once

#include <memory>
#include <vector>

#include "runtime/buffer.hpp"
#include "runtime/payloads/vis.hpp"

namespace uvflow::test {

inline std::shared_ptr<const VisBlock> with_value(const VisBlock& block, std::size_t at, cfloat value, float weight) {
  auto b = std::make_shared<VisBlock>(block);
  std::vector<cfloat> vis(block.vis.begin(), block.vis.end());
  std::vector<float> wt(block.weight.begin(), block.weight.end());
  vis.at(at) = value, wt.at(at) = weight;
  b->vis = Array<cfloat>::from(vis), b->weight = Array<float>::from(wt);
  return b;
}

}  // namespace uvflow::test
