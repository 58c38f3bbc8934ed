// A histogram of |w| in one pass without knowing its range: bins are a float's exponent and top 4
// mantissa bits (about 6 % wide, monotonic in |w|), so sources can merge partial histograms
// exactly (integer counts, any order) and give the observation the quantiles of |w| that
// kernels.wproj's estimate needs (Observation::abs_w_quantiles).
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace uvflow {

class AbsWHistogram {
 public:
  static constexpr int kBins = 1 << 12;  // 8 exponent + 4 mantissa bits of a positive float
  void add(double abs_w) { ++counts_[bin(abs_w)]; }
  void merge(const AbsWHistogram& o) {
    for (int i = 0; i < kBins; ++i) counts_[i] += o.counts_[i];
  }
  std::array<std::int64_t, kBins>& counts() { return counts_; }
  // |w| at the quantiles (i + 1/2) / n, i = 0..n-1 (each its bin's middle); empty without counts.
  std::vector<double> quantiles(int n) const {
    std::int64_t total = 0;
    for (auto c : counts_) total += c;
    std::vector<double> q;
    if (total == 0) return q;
    std::int64_t below = 0;
    int b = 0;
    for (int i = 0; i < n; ++i) {
      const double target = (i + 0.5) / n * double(total);
      while (b < kBins - 1 && double(below + counts_[b]) <= target) below += counts_[b++];
      q.push_back(double(std::bit_cast<float>((std::uint32_t(b) << 19) | (1u << 18))));
    }
    return q;
  }

 private:
  static int bin(double abs_w) { return int(std::bit_cast<std::uint32_t>(float(abs_w)) >> 19) & (kBins - 1); }
  std::array<std::int64_t, kBins> counts_{};
};

}  // namespace uvflow
