// Seeds of the randomised tests: each prints its seed in a SCOPED_TRACE, and UVFLOW_TEST_SEED
// replays the one a failure printed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace uvflow::test {

// A fresh random seed, or the value of UVFLOW_TEST_SEED when it is set.
inline std::uint64_t fresh_seed() {
  const char* replay = std::getenv("UVFLOW_TEST_SEED");
  return replay ? std::stoull(replay) : std::random_device{}();
}

// A fixed seed, then a fresh one (fresh_seed).
inline std::vector<std::uint64_t> seeds(std::uint64_t fixed) { return {fixed, fresh_seed()}; }

}  // namespace uvflow::test
