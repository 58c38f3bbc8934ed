// Entries repeated at one uvw, as a short baseline gives over many dumps: the uvflow designs walk
// each (cell, sub-cell offset) once per group (stages/shared/locality_order.cuh), so the gridding
// and degridding tests feed them such repeats.
#pragma once

#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

namespace uvflow::test {

// For `distinct` sources, each repeated 1 to max_repeats times: the source of every entry, shuffled.
inline std::vector<std::size_t> repeat_pattern(std::mt19937_64& rng, std::size_t distinct, int max_repeats) {
  std::uniform_int_distribution<int> times(1, max_repeats);
  std::vector<std::size_t> from;
  for (std::size_t i = 0; i < distinct; ++i)
    for (int r = times(rng); r > 0; --r) from.push_back(i);
  std::shuffle(from.begin(), from.end(), rng);
  return from;
}

}  // namespace uvflow::test
