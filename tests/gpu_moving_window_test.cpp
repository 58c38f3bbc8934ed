// grid.moving_window, cuda backend (Romein's moving window), against its cpu backend (which
// moving_window_test.cpp checks against grid.serial and Listing 1): the same random kernels and
// baseline tracks, uploaded, gridded on the device through the harness, downloaded and compared.
// Fixed and fresh random seeds. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "stages/grid/moving_window.hpp"
#include "tests/support/baseline_tracks.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/seeds.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;

GridRun run(const std::string& backend, std::shared_ptr<const KernelStack> ks, const Blocks& blocks, int time_block) {
  StageHarness h(grid_moving_window::spec(), backend, {{"time_block", std::int64_t(time_block)}});
  h.set_input("kernels", std::move(ks));
  for (auto& b : blocks) h.process({{"vis", b}});
  h.finish();
  return {h.output<Grid>("grid"), h.work()};
}

class GridMovingWindowGpu : public test::GpuTest {
 protected:
  // The cuda backend's grid (downloaded), totals and visibility count equal the cpu backend's.
  void expect_cuda_matches_cpu(const std::shared_ptr<const KernelStack>& ks, const Blocks& blocks, int time_block) {
    SCOPED_TRACE("time_block " + std::to_string(time_block));
    const GridRun cpu = run("cpu", ks, blocks, time_block);
    Blocks on_device;
    for (auto& b : blocks) on_device.push_back(moved(b, Location::device));
    const GridRun gpu = run("cuda", moved(ks, Location::device), on_device, time_block);
    EXPECT_EQ(gpu.grid->cells.location(), Location::device);
    auto g = moved(std::shared_ptr<const Grid>(gpu.grid), Location::host);
    const Grid& ref = *cpu.grid;
    EXPECT_EQ(g->geom, ks->geom);
    EXPECT_LT(relative_frobenius(*g, ref.cells), 1e-5);
    EXPECT_NEAR(g->norm(), ref.norm(), 1e-9 * std::abs(ref.norm()));
    EXPECT_EQ(g->gridded(), ref.gridded());
    EXPECT_EQ(g->skipped(), ref.skipped());
    EXPECT_GT(ref.gridded(), 0);
    EXPECT_EQ(gpu.work.visibilities, cpu.work.visibilities);
  }
};

struct Case {
  int planes, max_support, oversample, grid_size;
  Tracks tracks;
};

}  // namespace

TEST_F(GridMovingWindowGpu, RandomTracksMatchCpu) {
  // Supports up to 40 make windows of 81 x 81 points, more than a thread block's threads; the
  // 400-dump case puts more visibilities in one group than one shared-memory chunk holds.
  const std::vector<Case> cases = {{16, 8, 4, 256, {8, 30, 2}},         {5, 40, 8, 512, {5, 64, 1, 0.9}},
                                   {32, 16, 4, 1024, {24, 40, 2, 0.3}}, {1, 3, 2, 64, {4, 12, 1}},
                                   {8, 12, 4, 512, {3, 400, 1, 0.2, 0}}};
  for (auto seed : seeds(11242026ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (const Case& c : cases) {
      SCOPED_TRACE("planes " + std::to_string(c.planes) + ", max support " + std::to_string(c.max_support) +
                   ", grid " + std::to_string(c.grid_size) + ", dumps " + std::to_string(c.tracks.dumps));
      std::shared_ptr<const KernelStack> ks = random_kernel_stack(rng, c.planes, c.max_support, c.oversample, c.grid_size);
      const Blocks blocks{track_block(rng, *ks, c.tracks, 0, 5.0e9), make_block(*ks, {}, 1),
                          track_block(rng, *ks, c.tracks, 2, 5.0e9 + 30.0 * c.tracks.dumps)};
      for (int time_block : {1, 4, 10, 400}) expect_cuda_matches_cpu(ks, blocks, time_block);
    }
  }
}
