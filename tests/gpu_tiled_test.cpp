// grid.tiled, cuda backend, all four variants (uvflow, nvidia, nag, chebyshev), driven through the device
// sort chain (uvw.w_sort -> uvw.bounding_box -> tiles.count -> tiles.bucket_sort, cuda) and
// compared with the double-precision Listing 1 reference: relative Frobenius norm below 1e-5, the
// same norm, gridded and skipped counts, the same updates. Random inputs (fixed and fresh seeds),
// grid edges, both signs of w, a dense core of thousands of visibilities in a few cells, several
// blocks into one grid. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>

#include "runtime/error.hpp"
#include "stages/grid/tiled.hpp"
#include "stages/tiles/bucket_sort.hpp"
#include "stages/tiles/count.hpp"
#include "stages/uvw/bounding_box.hpp"
#include "stages/shared/chebyshev.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/chebyshev_reference.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/reference_gridder.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/wproj_stack.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;

struct Variant {
  const char* name;
  int tile_u, tile_v;
  int register_columns = 8;  // uvflow: the stage's default; 1 grids every footprint in registers, 33 none
  const char* accumulate = "float";
  const char* bucket_order = "any";  // tiles.bucket_sort's order
};
const Variant kVariants[] = {{"uvflow", 32, 32},     {"uvflow", 32, 16},     {"uvflow", 32, 16, 1},
                             {"uvflow", 32, 16, 16}, {"uvflow", 32, 32, 33}, {"nvidia", 32, 16},
                             {"nag", 32, 32},        {"uvflow", 32, 16, 8, "double", "visibility"}, {"nvidia", 32, 16, 8, "double", "visibility"},
                             {"nag", 32, 32, 8, "double"}};

class GridTiledGpu : public test::GpuTest {
 protected:
  // The whole device chain into the cuda gridder; the grid comes back to the host. With
  // `cpu_sort`, uvw.w_sort runs on the cpu (its blocks are the cuda backend's: off-grid visibilities
  // last with plane -1) and its blocks go up to the device chain.
  GridRun grid_on_device(const std::shared_ptr<const KernelStack>& ks, const Blocks& blocks, const Variant& v,
                         bool cpu_sort = false) {
    auto dks = moved(std::shared_ptr<const KernelStack>(ks), Location::device);
    StageHarness sort(uvw_w_sort::spec(), cpu_sort ? "cpu" : "cuda"), box(uvw_bounding_box::spec(), "cuda"),
        count(tiles_count::spec(), "cuda", {{"tile_u", std::int64_t(v.tile_u)}, {"tile_v", std::int64_t(v.tile_v)}}),
        bucket(tiles_bucket_sort::spec(), "cuda", {{"order", std::string(v.bucket_order)}}),
        grid(grid_tiled::spec(), "cuda", {{"variant", std::string(v.name)}, {"accumulate", std::string(v.accumulate)}, {"entries_per_item", std::int64_t(64)},
                                         {"register_columns", std::int64_t(v.register_columns)}, {"central_box", std::int64_t(1)}, {"nag_blocks_per_central_tile", std::int64_t(50)}});
    sort.set_input("kernels", cpu_sort ? std::shared_ptr<const KernelStack>(ks) : dks);
    grid.set_input("kernels", dks);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      // Each harness has its own stream and orders its work after its inputs' writers, as a pipeline does.
      sort.process({{"vis", cpu_sort ? blocks[i] : moved(blocks[i], Location::device)}});
      auto placed = sort.output<VisBlock>("vis", i);
      if (cpu_sort) placed = moved(placed, Location::device);
      box.process({{"vis", placed}});
      count.process({{"vis", placed}, {"box", box.outputs("box")[i]}});
      bucket.process({{"vis", placed}, {"counts", count.outputs("counts")[i]}});
      grid.process({{"buckets", bucket.outputs("buckets")[i]}});
    }
    grid.finish();
    auto out = grid.output<Grid>("grid");
    EXPECT_EQ(out->cells.location(), Location::device);
    return {moved(std::shared_ptr<const Grid>(out), Location::host), grid.work()};
  }

  void expect_matches(const std::shared_ptr<const KernelStack>& ks, const Blocks& blocks, bool cpu_sort = false) {
    const RefGrid ref = ref_grid(*ks, blocks);
    for (const Variant& v : kVariants) {
      SCOPED_TRACE(std::string(v.name) + " " + std::to_string(v.tile_u) + "x" + std::to_string(v.tile_v) +
                 " register_columns " + std::to_string(v.register_columns) + " accumulate " + v.accumulate +
                 " bucket order " + v.bucket_order);
      const GridRun run = grid_on_device(ks, blocks, v, cpu_sort);
      EXPECT_LT(relative_frobenius(*run.grid, ref.cells), 1e-5);
      EXPECT_NEAR(run.grid->norm(), ref.norm, 1e-9 * std::abs(ref.norm));
      EXPECT_EQ(run.grid->gridded(), ref.gridded);
      EXPECT_EQ(run.grid->skipped(), ref.skipped);
      EXPECT_EQ(run.work.visibilities, double(ref.gridded));
      EXPECT_EQ(run.work.updates, ref.updates);
    }
  }
};


std::vector<VisAt> concat_vis(std::vector<VisAt> a, const std::vector<VisAt>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_F(GridTiledGpu, RandomBlocksMatchTheReference) {
  for (auto seed : test::seeds(20261122ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 24, 20, 4, 256);
    build_kernel_layouts(*ks, {.rows = true, .gpu = true});
    Blocks blocks;
    for (int b = 0; b < 3; ++b) blocks.push_back(make_block(*ks, random_vis(rng, *ks, 20000), b));
    expect_matches(ks, blocks);
  }
}

TEST_F(GridTiledGpu, EdgesAndBothSignsOfW) {
  for (auto seed : test::seeds(20261122ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (int o : {2, 4, 8}) {
      auto ks = random_kernel_stack(rng, 8, 12, o, 96);
      build_kernel_layouts(*ks, {.rows = true, .gpu = true});
      std::int64_t outside = 0;
      auto v = edge_vis(rng, *ks, &outside);
      std::shuffle(v.begin(), v.end(), rng);
      expect_matches(ks, {make_block(*ks, v)});
    }
  }
}

// Blocks sorted on the cpu hold their off-grid visibilities with plane -1, as the cuda sort's do,
// and carry the block's own `skipped`: the cuda gridder counts both, as the reference does.
TEST_F(GridTiledGpu, BlocksSortedOnTheCpuKeepTheirSkippedCount) {
  for (auto seed : test::seeds(20261122ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 8, 12, 4, 96);
    build_kernel_layouts(*ks, {.rows = true, .gpu = true});
    std::int64_t outside = 0;
    auto v = edge_vis(rng, *ks, &outside);
    ASSERT_GT(outside, 0);
    auto block = make_block(*ks, v);
    block->skipped = 4;
    expect_matches(ks, {block}, true);
  }
}

TEST_F(GridTiledGpu, DenseCoreOfThousandsOfVisibilitiesInAFewCells) {
  for (auto seed : test::seeds(20261122ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 16, 10, 4, 192);
    build_kernel_layouts(*ks, {.rows = true, .gpu = true});
    auto v = hot_cell_vis(rng, *ks, 6000, 0, 0);
    auto more = hot_cell_vis(rng, *ks, 3000, 1, -1);
    v.insert(v.end(), more.begin(), more.end());
    auto spread = random_vis(rng, *ks, 4000);
    v.insert(v.end(), spread.begin(), spread.end());
    std::shuffle(v.begin(), v.end(), rng);
    expect_matches(ks, {make_block(*ks, v)});
  }
}

// accumulate: double on the device, with the buckets in visibility order: the uvflow variant's grid
// is the same bit for bit whatever the order of the blocks (its items' sums are fixed by the data and
// added in double), which is what lets MPI ranks split the blocks without changing the image. In
// float the dense core's cells depend on the order (checked too, so that the test can tell).
TEST_F(GridTiledGpu, AccumulateDoubleDoesNotDependOnTheBlockOrder) {
  for (auto seed : test::seeds(20261124ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 16, 10, 4, 192);
    build_kernel_layouts(*ks, {.rows = true, .gpu = true});
    auto v = concat_vis(hot_cell_vis(rng, *ks, 20000, 0, 0), random_vis(rng, *ks, 8000));
    std::shuffle(v.begin(), v.end(), rng);
    auto slice = [&](int b) { return std::vector<VisAt>(v.begin() + b * 7000, v.begin() + (b + 1) * 7000); };
    Blocks forward, backward;
    for (int b = 0; b < 4; ++b) {
      forward.push_back(make_block(*ks, slice(b), b));
      backward.push_back(make_block(*ks, slice(3 - b), b));
    }
    auto differing = [&](const Variant& var) {
      const GridRun a = grid_on_device(ks, forward, var), b = grid_on_device(ks, backward, var);
      std::size_t n = 0;
      for (std::size_t i = 0; i < a.grid->cells.size(); ++i) n += a.grid->cells[i] != b.grid->cells[i];
      return n;
    };
    EXPECT_EQ(differing({"uvflow", 32, 16, 8, "double", "visibility"}), 0u);
    EXPECT_GT(differing({"uvflow", 32, 16, 8, "float", "visibility"}), 0u);
  }
}

TEST_F(GridTiledGpu, EmptyStreamGivesAZeroGrid) {
  std::mt19937_64 rng(3);
  auto ks = random_kernel_stack(rng, 4, 4, 4, 64);
  build_kernel_layouts(*ks, {.rows = false, .gpu = true});
  for (const Variant& v : kVariants) {
    const GridRun run = grid_on_device(ks, {}, v);
    for (const cfloat& c : run.grid->cells) ASSERT_EQ(c, cfloat(0));
    EXPECT_EQ(run.grid->norm(), 0.0);
  }
}

TEST_F(GridTiledGpu, WrongLayoutOrTilingIsRefused) {
  std::mt19937_64 rng(4);
  auto ks = random_kernel_stack(rng, 4, 4, 4, 64);  // rows layout only: no OERC, no NAG
  Blocks blocks{make_block(*ks, random_vis(rng, *ks, 100))};
  EXPECT_THROW(grid_on_device(ks, blocks, {"uvflow", 32, 32}), std::runtime_error);
  build_kernel_layouts(*ks, {.rows = false, .gpu = true});
  EXPECT_THROW(grid_on_device(ks, blocks, {"nvidia", 32, 32}), std::runtime_error);  // nvidia needs 32 x 16
}

// Variant chebyshev (kernels evaluated from the stack's Chebyshev fit): the cuda design against the
// cpu backend, its reference, on the same blocks and fit, and both against Listing 1 with the
// fitted kernel; register and shared-memory paths, both tile heights, r^2 and r, real w-kernels
// (supports 4 to 24), a dense core and the grid's edges.
TEST_F(GridTiledGpu, ChebyshevMatchesTheCpuBackend) {
  const auto table = wproj_stack(256, 30, 4, 1.2, 20000);
  for (auto seed : test::seeds(20261124ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (auto [terms, in_r] : {std::pair{25, false}, std::pair{50, true}, std::pair{11, false}}) {
      SCOPED_TRACE(std::to_string(terms) + (in_r ? " terms in r" : " terms in r^2"));
      auto ks = std::make_shared<KernelStack>(*table);
      fit_chebyshev(*ks, terms, in_r);
      std::int64_t outside = 0;
      auto v = concat_vis(random_vis(rng, *ks, 20000), edge_vis(rng, *ks, &outside));
      v = concat_vis(v, hot_cell_vis(rng, *ks, 3000, 0, 0));
      std::shuffle(v.begin(), v.end(), rng);
      const Blocks blocks{make_block(*ks, std::vector<VisAt>(v.begin(), v.begin() + v.size() / 2), 0),
                          make_block(*ks, std::vector<VisAt>(v.begin() + v.size() / 2, v.end()), 1)};
      const GridRun cpu = run_tiled_cpu(ks, blocks, "chebyshev");
      const RefGrid ref = ref_grid(*fitted_as_quarters(*ks), blocks);
      ASSERT_GT(ref.skipped, 0);
      EXPECT_LT(relative_frobenius(*cpu.grid, ref.cells), 1e-5);
      for (const Variant& variant : {Variant{"chebyshev", 32, 16}, Variant{"chebyshev", 32, 32},
                                     Variant{"chebyshev", 32, 16, 1}, Variant{"chebyshev", 32, 32, 33}}) {
        SCOPED_TRACE(std::to_string(variant.tile_v) + " rows, register_columns " + std::to_string(variant.register_columns));
        const GridRun run = grid_on_device(ks, blocks, variant);
        EXPECT_LT(relative_frobenius(*run.grid, cpu.grid->cells), 1e-5);
        EXPECT_LT(relative_frobenius(*run.grid, ref.cells), 1e-5);
        EXPECT_NEAR(run.grid->norm(), cpu.grid->norm(), 1e-9 * std::abs(cpu.grid->norm()));
        EXPECT_EQ(run.grid->gridded(), cpu.grid->gridded());
        EXPECT_EQ(run.grid->skipped(), cpu.grid->skipped());
        EXPECT_EQ(run.work.updates, cpu.work.updates);
      }
    }
  }
}

TEST_F(GridTiledGpu, ChebyshevNeedsAFittedStack) {
  std::mt19937_64 rng(5);
  auto ks = random_kernel_stack(rng, 4, 4, 4, 64);
  build_kernel_layouts(*ks, {.rows = true, .gpu = true});
  Blocks blocks{make_block(*ks, random_vis(rng, *ks, 100))};
  EXPECT_THROW(grid_on_device(ks, blocks, {"chebyshev", 32, 16}), InputError);
}
