// Small stages for testing the framework itself: a counting source, a parallel scaler, an ordered
// accumulator, a two-input join, and stages that fail, dawdle or write files on demand.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/registry.hpp"

namespace uvflow::test {

inline constexpr char kNumbers[] = "Numbers";
struct Numbers : PayloadOf<Numbers, kNumbers> {
  Numbers() { alive.fetch_add(1); update_peak(); }
  Numbers(const Numbers& o) : PayloadOf(o), index(o.index), values(o.values) { alive.fetch_add(1); update_peak(); }
  ~Numbers() override { alive.fetch_sub(1); }
  std::int64_t index = 0;
  Array<double> values;
  template <class F> void each_array(F&& f) { f(values); }

  static inline std::atomic<int> alive{0}, peak{0};
  static void update_peak() {
    int a = alive.load(), p = peak.load();
    while (a > p && !peak.compare_exchange_weak(p, a)) {}
  }
};

// Order in which test.sum saw its items (checked by the tests).
std::vector<std::int64_t>& sum_order();

void register_test_stages(Registry& r);

// A pipeline of test stages with a loop over a stream: the state s starts as test.source's stream (6
// items of `size` copies of the item's index) and each of 3 cycles adds the source again (a value
// from outside the loop, the same every cycle), so s ends as 4 x the source and test.write_total
// writes 4 x size x (0 + 1 + ... + 5) to `total`.
std::string stream_state_loop(const std::filesystem::path& total, int size);

}  // namespace uvflow::test
