// Raw visibility blocks as a moving-window gridder sees them: [dump][baseline][channel] with
// antenna1, antenna2, time and channel labels, each baseline's track moving a fraction of a cell
// per dump and its w drifting across several w-planes, some visibilities dropped (flagged), so
// that groups of time_block dumps hold fewer than time_block visibilities. And the independent
// statement of grid.moving_window's approximation: the same blocks with each visibility's w
// replaced by its group's mean, which tests/support/reference_gridder then grids exactly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "tests/support/grid_cases.hpp"

namespace uvflow::test {

struct Tracks {
  int stations = 8, dumps = 30, channels = 2;
  double step_cells = 0.4;  // the most a track moves per dump along u and v
  double drop = 0.1;        // fraction of visibilities left out
};

inline std::shared_ptr<VisBlock> track_block(std::mt19937_64& rng, const KernelStack& ks, const Tracks& t,
                                             std::int64_t index, double first_time) {
  const double half = 0.55 * ks.geom.grid_size;
  std::uniform_real_distribution<double> pos(-half, half), w0(-1.2 * ks.max_w, 1.2 * ks.max_w);
  std::uniform_real_distribution<double> step(-t.step_cells, t.step_cells), dw(-0.05 * ks.max_w, 0.05 * ks.max_w);
  std::uniform_real_distribution<double> keep(0, 1);
  struct Baseline {
    int a1, a2;
    double u, v, w, du, dv, dw;
  };
  std::vector<Baseline> baselines;
  for (int a1 = 0; a1 < t.stations; ++a1)
    for (int a2 = a1 + 1; a2 < t.stations; ++a2) baselines.push_back({a1, a2, pos(rng), pos(rng), w0(rng), step(rng), step(rng), dw(rng)});
  std::vector<VisAt> vis;
  std::vector<std::int32_t> ant1, ant2, chan;
  std::vector<double> time;
  for (int d = 0; d < t.dumps; ++d)
    for (const Baseline& b : baselines)
      for (int c = 0; c < t.channels; ++c) {
        if (keep(rng) < t.drop) continue;
        const double f = 1 + 0.02 * c;  // uvw in wavelengths grow with frequency
        VisAt x{f * (b.u + d * b.du), f * (b.v + d * b.dv), f * (b.w + d * b.dw)};
        random_value(rng, x);
        vis.push_back(x);
        ant1.push_back(b.a1), ant2.push_back(b.a2), chan.push_back(c), time.push_back(first_time + 30.0 * d);
      }
  auto block = make_block(ks, vis, index);
  block->antenna1 = Array<std::int32_t>::from(ant1);
  block->antenna2 = Array<std::int32_t>::from(ant2);
  block->channel = Array<std::int32_t>::from(chan);
  block->time = Array<double>::from(time);
  return block;
}

// Each block with every w replaced by the mean w (summed in double in block order) of its group:
// same antennas and channel, dump index (rank of its time among the block's distinct times)
// divided by time_block.
inline std::vector<std::shared_ptr<const VisBlock>> group_mean_w(const std::vector<std::shared_ptr<const VisBlock>>& blocks,
                                                                 int time_block) {
  std::vector<std::shared_ptr<const VisBlock>> out;
  for (const auto& b : blocks) {
    const std::set<double> times(b->time.begin(), b->time.end());
    const std::vector<double> sorted(times.begin(), times.end());
    using Key = std::tuple<int, int, int, long>;
    auto key = [&](std::size_t i) {
      const long dump = long(std::lower_bound(sorted.begin(), sorted.end(), b->time[i]) - sorted.begin());
      return Key{b->antenna1[i], b->antenna2[i], b->channel[i], dump / time_block};
    };
    std::map<Key, std::pair<double, int>> sums;
    for (std::size_t i = 0; i < b->size(); ++i) {
      auto& s = sums[key(i)];
      s.first += b->ww[i];
      s.second += 1;
    }
    auto copy = std::make_shared<VisBlock>(*b);
    copy->ww = Array<float>::host(b->size());
    for (std::size_t i = 0; i < b->size(); ++i) {
      const auto& s = sums[key(i)];
      copy->ww[i] = float(s.first / s.second);
    }
    out.push_back(copy);
  }
  return out;
}

}  // namespace uvflow::test
