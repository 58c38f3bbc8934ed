// grid.moving_window, cpu backend: at time_block 1 it is grid.serial (same placement, float
// rounding apart); at larger blocks it is Listing 1 (tests/support/reference_gridder, double
// precision) fed each group's mean w, computed independently in tests/support/baseline_tracks.hpp.
// Fixed and fresh random seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "stages/grid/moving_window.hpp"
#include "stages/grid/serial.hpp"
#include "tests/support/baseline_tracks.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/reference_gridder.hpp"
#include "tests/support/seeds.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;

GridRun moving_window(std::shared_ptr<const KernelStack> ks, const Blocks& blocks, int time_block) {
  StageHarness h(grid_moving_window::spec(), "cpu", {{"time_block", std::int64_t(time_block)}});
  h.set_input("kernels", std::move(ks));
  for (auto& b : blocks) h.process({{"vis", b}});
  h.finish();
  return {h.output<Grid>("grid"), h.work()};
}

struct Case {
  int planes, max_support, oversample, grid_size;
  Tracks tracks;
};

// Two blocks of tracks (the second starting where the first ended in time) on random kernels.
Blocks track_blocks(std::mt19937_64& rng, const KernelStack& ks, const Tracks& t) {
  return {track_block(rng, ks, t, 0, 5.0e9), track_block(rng, ks, t, 1, 5.0e9 + 30.0 * t.dumps)};
}

const std::vector<Case> kCases = {{16, 8, 4, 256, {8, 30, 2}}, {5, 20, 8, 512, {5, 64, 1, 0.9}},
                                  {32, 4, 4, 1024, {12, 25, 3, 0.2, 0.3}}, {1, 3, 2, 64, {4, 12, 1}}};

}  // namespace

TEST(GridMovingWindow, DeclaresItsParameterAndBackends) {
  const StageSpec s = grid_moving_window::spec();
  EXPECT_EQ(s.type, "grid.moving_window");
  ASSERT_NE(s.input("vis"), nullptr);
  ASSERT_NE(s.input("kernels"), nullptr);
  ASSERT_NE(s.output("grid"), nullptr);
}

TEST(GridMovingWindow, TimeBlockOneIsGridSerial) {
  for (auto seed : seeds(20261124ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (const Case& c : kCases) {
      SCOPED_TRACE("planes " + std::to_string(c.planes) + ", grid " + std::to_string(c.grid_size));
      std::shared_ptr<const KernelStack> ks = random_kernel_stack(rng, c.planes, c.max_support, c.oversample, c.grid_size);
      const Blocks blocks = track_blocks(rng, *ks, c.tracks);
      const GridRun mw = moving_window(ks, blocks, 1);
      const GridRun serial = run_gridder(grid_serial::spec(), "cpu", ks, blocks);
      EXPECT_LT(relative_frobenius(*mw.grid, serial.grid->cells), 1e-6);
      EXPECT_NEAR(mw.grid->norm(), serial.grid->norm(), 1e-9 * std::abs(serial.grid->norm()));
      EXPECT_EQ(mw.grid->gridded(), serial.grid->gridded());
      EXPECT_EQ(mw.grid->skipped(), serial.grid->skipped());
      EXPECT_GT(mw.grid->gridded(), 0);
      EXPECT_EQ(mw.work.updates, serial.work.updates);
    }
  }
}

TEST(GridMovingWindow, TimeBlocksAreListing1WithEachGroupsMeanW) {
  for (auto seed : seeds(7102026ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (const Case& c : kCases) {
      SCOPED_TRACE("planes " + std::to_string(c.planes) + ", grid " + std::to_string(c.grid_size));
      std::shared_ptr<const KernelStack> ks = random_kernel_stack(rng, c.planes, c.max_support, c.oversample, c.grid_size);
      const Blocks blocks = track_blocks(rng, *ks, c.tracks);
      const RefGrid exact = ref_grid(*ks, blocks);
      for (int time_block : {2, 3, 10, 1000}) {
        SCOPED_TRACE("time_block " + std::to_string(time_block));
        const GridRun mw = moving_window(ks, blocks, time_block);
        const RefGrid ref = ref_grid(*ks, group_mean_w(blocks, time_block));
        EXPECT_LT(relative_frobenius(*mw.grid, ref.cells), 1e-5);
        EXPECT_NEAR(mw.grid->norm(), ref.norm, 1e-9 * std::abs(ref.norm));
        EXPECT_EQ(mw.grid->gridded(), ref.gridded);
        EXPECT_EQ(mw.grid->skipped(), ref.skipped);
        EXPECT_EQ(mw.work.updates, ref.updates);
        // The approximation is at work: w drifts across planes within a group (one plane: no change).
        if (c.planes > 1) {
          EXPECT_GT(relative_frobenius(*mw.grid, exact.cells), 1e-3);
        }
      }
    }
  }
}

TEST(GridMovingWindow, EmptyBlocksAndUnitVisibilities) {
  std::mt19937_64 rng(fresh_seed());
  std::shared_ptr<const KernelStack> ks = random_kernel_stack(rng, 8, 6, 4, 256);
  auto block = track_block(rng, *ks, {6, 20, 1}, 0, 1.0e9);
  for (auto& v : block->vis) v = 1;
  for (auto& w : block->weight) w = 1;
  const GridRun mw = moving_window(ks, {make_block(*ks, {}, 0), block}, 5);
  // With unit visibilities and weights, the real parts of the grid sum to the norm.
  double sum = 0;
  for (const cfloat& c : mw.grid->cells) sum += c.real();
  EXPECT_NEAR(sum, mw.grid->norm(), 1e-5 * mw.grid->norm());
  EXPECT_GT(mw.grid->gridded(), 0);
  EXPECT_EQ(mw.grid->gridded() + mw.grid->skipped(), std::int64_t(block->size()));
}

TEST(GridMovingWindow, RejectsBlocksWithoutLabelsOrOutOfTimeOrder) {
  std::mt19937_64 rng(3);
  std::shared_ptr<const KernelStack> ks = random_kernel_stack(rng, 4, 3, 4, 128);
  auto unlabelled = make_block(*ks, random_vis(rng, *ks, 10));
  EXPECT_THROW(moving_window(ks, {unlabelled}, 4), InputError);
  auto backwards = track_block(rng, *ks, {4, 5, 1, 0.4, 0}, 0, 1.0e9);
  std::swap(backwards->time[0], backwards->time[backwards->size() - 1]);
  EXPECT_THROW(moving_window(ks, {backwards}, 4), InputError);
}
