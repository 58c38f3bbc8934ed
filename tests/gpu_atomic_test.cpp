// grid.atomic, cuda backend (both variants, float and double sums), against its cpu backend (which
// atomic_test.cpp checks against Listing 1) with the same sums: the same random kernels and
// visibilities, uploaded, gridded on the device through the harness, downloaded and compared. Fixed and fresh random seeds; for the uvflow
// variant also dense clusters (its groups, both signs of w mixed), entries repeated at one uvw (merged
// in its groups) and blocks placed by uvw.w_sort.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "stages/grid/atomic.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/seeds.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;


// (variant, accumulate)
class GridAtomicGpu : public test::GpuTest,
                      public ::testing::WithParamInterface<std::tuple<const char*, const char*>> {
 protected:
  std::string variant() const { return std::get<0>(GetParam()); }
  std::string accumulate() const { return std::get<1>(GetParam()); }
  // Float sums differ from the cpu backend's by the order of their float adds; double sums (float
  // products, a group's sum of up to 8 in uvflow) by the products' rounding only.
  double tolerance() const { return accumulate() == "double" ? 1e-6 : 1e-5; }
  // `p` with the test's accumulate and double_box (the stage's default unless a test sets it).
  std::map<std::string, ParamValue> params(std::map<std::string, ParamValue> p) const {
    p["accumulate"] = accumulate();
    if (double_box_ >= 0) p["double_box"] = double_box_;
    return p;
  }
  std::int64_t double_box_ = -1;

  // Runs the cuda backend's variant on device copies of the inputs; returns its grid, downloaded,
  // and work.
  GridRun grid_cuda(const std::shared_ptr<const KernelStack>& ks, const Blocks& blocks) {
    Blocks on_device;
    for (auto& b : blocks) on_device.push_back(moved(b, Location::device));
    auto dks = moved(ks, Location::device);
    const GridRun run =
        run_gridder(grid_atomic::spec(), "cuda", dks, on_device, params({{"variant", variant()}}));
    EXPECT_EQ(run.grid->cells.location(), Location::device);
    EXPECT_EQ(run.grid->totals.location(), Location::device);
    auto host = moved(std::shared_ptr<const Grid>(run.grid), Location::host);
    return {host, run.work};
  }

  // The cuda backend's grid, totals and visibility count equal the cpu backend's.
  GridRun expect_cuda_matches_cpu(const std::shared_ptr<const KernelStack>& ks, const Blocks& blocks) {
    const GridRun cpu = run_gridder(grid_atomic::spec(), "cpu", ks, blocks, params({}));
    const GridRun gpu = grid_cuda(ks, blocks);
    const Grid &g = *gpu.grid, &ref = *cpu.grid;
    EXPECT_EQ(g.geom, ks->geom);
    EXPECT_LT(relative_frobenius(g, ref.cells), tolerance());
    EXPECT_TRUE(g.cells64.empty());  // one process: the double grid is not kept
    EXPECT_NEAR(g.norm(), ref.norm(), 1e-9 * std::abs(ref.norm()));
    EXPECT_EQ(g.gridded(), ref.gridded());
    EXPECT_EQ(g.skipped(), ref.skipped());
    EXPECT_EQ(gpu.work.visibilities, cpu.work.visibilities);
    if (variant() == "uvflow") {
      EXPECT_EQ(gpu.work.updates, cpu.work.updates);
    }
    return gpu;
  }

};

}  // namespace

TEST_P(GridAtomicGpu, RandomBlocksMatchCpu) {
  struct Shape {
    int planes, max_support, oversample, grid_size;
    std::size_t vis_per_block;
  };
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    // Supports up to 40 make rows of 81 values: the lanes loop over k more than once.
    for (const Shape& sh : {Shape{16, 8, 4, 256, 20000}, Shape{5, 40, 8, 512, 3000}, Shape{1, 3, 2, 64, 5000},
                            Shape{32, 16, 4, 1024, 300000}}) {
      SCOPED_TRACE("planes " + std::to_string(sh.planes) + ", max support " + std::to_string(sh.max_support) +
                   ", oversample " + std::to_string(sh.oversample));
      auto ks = random_kernel_stack(rng, sh.planes, sh.max_support, sh.oversample, sh.grid_size);
      const Blocks blocks{make_block(*ks, random_vis(rng, *ks, sh.vis_per_block), 0), make_block(*ks, {}, 1),
                          make_block(*ks, random_vis(rng, *ks, sh.vis_per_block / 3), 2),
                          make_block(*ks, random_vis(rng, *ks, 1), 3)};
      const GridRun gpu = expect_cuda_matches_cpu(ks, blocks);
      EXPECT_GT(gpu.grid->gridded(), 0);
      EXPECT_GT(gpu.grid->skipped(), 0);
    }
  }
}

TEST_P(GridAtomicGpu, EdgeVisibilitiesMatchCpu) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 8, 12, 4, 128);
    std::int64_t outside = 0;
    const auto vis = edge_vis(rng, *ks, &outside);
    const GridRun gpu = expect_cuda_matches_cpu(ks, {make_block(*ks, vis)});
    EXPECT_EQ(gpu.grid->skipped(), outside);
  }
}

TEST_P(GridAtomicGpu, ThousandsOfVisibilitiesInOneCellMatchCpu) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 6, 6, 4, 96);
    const GridRun gpu = expect_cuda_matches_cpu(ks, {make_block(*ks, hot_cell_vis(rng, *ks, 100000, 3, -2), 0),
                                                     make_block(*ks, hot_cell_vis(rng, *ks, 5000, -7, 4), 1)});
    EXPECT_EQ(gpu.grid->gridded(), 105000);
  }
}

TEST_P(GridAtomicGpu, UnitVisibilitiesSumToNorm) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 10, 10, 4, 200);
    auto vis = random_vis(rng, *ks, 10000);
    for (auto& v : vis) v.vis = 1, v.weight = 1;
    const GridRun gpu = expect_cuda_matches_cpu(ks, {make_block(*ks, vis)});
    double sum = 0;
    for (const cfloat& c : gpu.grid->cells) sum += c.real();
    EXPECT_GT(gpu.grid->norm(), 0);
    EXPECT_NEAR(sum, gpu.grid->norm(), 1e-5 * gpu.grid->norm());
  }
}

// The cpu backend stops on non-finite uvw; a kernel cannot, so it skips and counts them.
TEST_P(GridAtomicGpu, NonFiniteUvwIsSkipped) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ks = random_kernel_stack(rng, 4, 5, 4, 64);
  const auto vis = random_vis(rng, *ks, 500);
  auto with_bad = vis;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  with_bad.insert(with_bad.begin() + 100, {{nan, 0, 0}, {0, inf, 0}, {0, 0, -inf}});
  const GridRun cpu = run_gridder(grid_atomic::spec(), "cpu", ks, {make_block(*ks, vis)});
  const GridRun gpu = grid_cuda(ks, {make_block(*ks, with_bad)});
  EXPECT_LT(relative_frobenius(*gpu.grid, cpu.grid->cells), 1e-5);
  EXPECT_NEAR(gpu.grid->norm(), cpu.grid->norm(), 1e-9 * cpu.grid->norm());
  EXPECT_EQ(gpu.grid->gridded(), cpu.grid->gridded());
  EXPECT_EQ(gpu.grid->skipped(), cpu.grid->skipped() + 3);
}

TEST_P(GridAtomicGpu, NoBlocksGiveAnEmptyGrid) {
  std::mt19937_64 rng(7);
  auto ks = random_kernel_stack(rng, 3, 4, 4, 32);
  const GridRun gpu = grid_cuda(ks, {});
  EXPECT_EQ(gpu.grid->geom, ks->geom);
  ASSERT_EQ(gpu.grid->cells.size(), 32u * 32u);
  EXPECT_TRUE(std::all_of(gpu.grid->cells.begin(), gpu.grid->cells.end(), [](cfloat c) { return c == cfloat(0); }));
  EXPECT_EQ(gpu.grid->norm(), 0);
  EXPECT_EQ(gpu.grid->gridded(), 0);
  EXPECT_EQ(gpu.grid->skipped(), 0);
}

// Dense clusters of visibilities within a few cells of each other, of one w-plane each, in both
// signs of w (the uvflow variant's groups of up to 8, conjugated and plain kernels side by side),
// wide supports (rows of up to 97 values: three column passes) and narrow ones; with them entries
// repeated at one uvw (1 to 20 times each, values of their own, shuffled), which the uvflow variant
// grids once per cell and sub-cell offset of a group, their values summed.
TEST_P(GridAtomicGpu, DenseClustersAndRepeatsMatchCpu) {
  for (auto seed : test::seeds(20261125ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (int max_support : {4, 48}) {
      auto ks = random_kernel_stack(rng, 6, max_support, 4, 512);
      std::uniform_real_distribution<double> centre(-150, 150), near(-5, 5), unit(0, 1);
      std::vector<VisAt> vis;
      for (int c = 0; c < 40; ++c) {
        const double u = centre(rng), v = centre(rng), w = unit(rng) * ks->max_w;
        for (int i = 0; i < 60; ++i)
          vis.push_back({u + near(rng), v + near(rng), (unit(rng) < 0.5 ? -1 : 1) * w,
                         cfloat(float(unit(rng)), float(unit(rng) - 0.5)), float(0.5 + unit(rng))});
      }
      for (const VisAt& x : repeated_vis(rng, *ks, 3000, 20)) vis.push_back(x);
      const GridRun gpu = expect_cuda_matches_cpu(ks, {make_block(*ks, vis)});
      EXPECT_GT(gpu.grid->gridded(), 0);
    }
  }
}

// double_box 0 (float sums everywhere, the centre too) and a box wider than the grid.
TEST_P(GridAtomicGpu, DoubleBoxSizesMatchCpu) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ks = random_kernel_stack(rng, 8, 12, 4, 256);
  const Blocks blocks{make_block(*ks, random_vis(rng, *ks, 20000), 0),
                      make_block(*ks, hot_cell_vis(rng, *ks, 20000, 30, -25), 1)};
  for (std::int64_t box : {0, 16, 512}) {
    SCOPED_TRACE("double_box " + std::to_string(box));
    double_box_ = box;
    expect_cuda_matches_cpu(ks, blocks);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, GridAtomicGpu,
                         ::testing::Combine(::testing::Values("listing", "uvflow"), ::testing::Values("float", "double")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// The uvflow variant reuses the coords of blocks placed by uvw.w_sort (on the device), and takes
// a block in cell order as its locality order: the same grid as the cpu backend on the raw block.
class GridAtomicGpuPlaced : public test::GpuTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(GridAtomicGpuPlaced, WSortedBlocksMatchCpu) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto ks = random_kernel_stack(rng, 12, 20, 4, 512);
  auto raw = make_block(*ks, random_vis(rng, *ks, 30000));
  auto dks = moved(std::shared_ptr<const KernelStack>(ks), Location::device);
  StageHarness sort(uvw_w_sort::spec(), "cuda", {{"within_plane", std::string(GetParam())}});
  sort.set_input("kernels", dks);
  sort.process({{"vis", moved(std::shared_ptr<const VisBlock>(raw), Location::device)}});
  auto sorted = sort.output<VisBlock>("vis");
  ASSERT_TRUE(sorted->placed());
  EXPECT_EQ(sorted->cell_order, std::string(GetParam()) == "cell");
  const GridRun cpu = run_gridder(grid_atomic::spec(), "cpu", ks, {raw});
  const GridRun gpu = run_gridder(grid_atomic::spec(), "cuda", dks, {sorted}, {{"variant", std::string("uvflow")}});
  auto host = moved(std::shared_ptr<const Grid>(gpu.grid), Location::host);
  EXPECT_LT(relative_frobenius(*host, cpu.grid->cells), 1e-5);
  EXPECT_NEAR(host->norm(), cpu.grid->norm(), 1e-9 * cpu.grid->norm());
  EXPECT_EQ(host->gridded(), cpu.grid->gridded());
  EXPECT_EQ(gpu.work.updates, cpu.work.updates);
}

INSTANTIATE_TEST_SUITE_P(WithinPlane, GridAtomicGpuPlaced, ::testing::Values("input", "cell"));
