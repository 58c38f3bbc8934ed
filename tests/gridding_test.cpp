// The CPU gridding chain: grid.serial, and grid.tiled fed by uvw.w_sort -> uvw.bounding_box ->
// tiles.count -> tiles.bucket_sort, against the independent double-precision Listing 1 of
// tests/support/reference_gridder; and each sorting and tiling stage against brute force.
// Every random test runs on a fixed seed and a fresh one (printed on failure).
#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/payloads/tiles.hpp"
#include "stages/grid/serial.hpp"
#include "stages/grid/tiled.hpp"
#include "stages/tiles/bucket_sort.hpp"
#include "stages/tiles/count.hpp"
#include "stages/uvw/bounding_box.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/reference_gridder.hpp"
#include "tests/support/seeds.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;


struct Tiling {
  int tile_u = 64, tile_v = 64;
  std::int64_t central_box = 2;
  std::string accumulate = "float";
  std::string str() const {
    return "tiles " + std::to_string(tile_u) + "x" + std::to_string(tile_v) + ", central_box " + std::to_string(central_box) +
           ", accumulate " + accumulate;
  }
};

// What the stages before grid.tiled make of each block.
struct Chain {
  Blocks placed;
  std::vector<std::shared_ptr<const BoundingBox>> boxes;
  std::vector<std::shared_ptr<const TileCounts>> counts;
  std::vector<std::shared_ptr<const TileBuckets>> buckets;
};

Chain run_chain(std::shared_ptr<const KernelStack> ks, const Blocks& blocks, const Tiling& t) {
  StageHarness sort(uvw_w_sort::spec(), "cpu"), box(uvw_bounding_box::spec(), "cpu"), bucket(tiles_bucket_sort::spec(), "cpu");
  StageHarness count(tiles_count::spec(), "cpu", {{"tile_u", std::int64_t(t.tile_u)}, {"tile_v", std::int64_t(t.tile_v)}});
  sort.set_input("kernels", ks);
  Chain c;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    sort.process({{"vis", blocks[i]}});
    c.placed.push_back(sort.output<VisBlock>("vis", i));
    box.process({{"vis", c.placed[i]}});
    c.boxes.push_back(box.output<BoundingBox>("box", i));
    count.process({{"vis", c.placed[i]}, {"box", c.boxes[i]}});
    c.counts.push_back(count.output<TileCounts>("counts", i));
    bucket.process({{"vis", c.placed[i]}, {"counts", c.counts[i]}});
    c.buckets.push_back(bucket.output<TileBuckets>("buckets", i));
  }
  return c;
}

GridRun run_tiled(std::shared_ptr<const KernelStack> ks, const Blocks& blocks, const Tiling& t) {
  const Chain c = run_chain(ks, blocks, t);
  StageHarness h(grid_tiled::spec(), "cpu", {{"central_box", t.central_box}, {"accumulate", t.accumulate}});
  h.set_input("kernels", ks);
  for (auto& b : c.buckets) h.process({{"buckets", b}});
  h.finish();
  return {h.output<Grid>("grid"), h.work()};
}

// The same with `threads` threads, more than the cores if asked: the central box's parts and the
// tile queue then have that many takers.
GridRun run_tiled(std::shared_ptr<const KernelStack> ks, const Blocks& blocks, const Tiling& t, int threads) {
  tbb::global_control allow(tbb::global_control::max_allowed_parallelism, threads);
  GridRun run;
  tbb::task_arena(threads).execute([&] { run = run_tiled(ks, blocks, t); });
  return run;
}

void expect_matches(const GridRun& run, const RefGrid& ref) {
  EXPECT_LT(relative_frobenius(*run.grid, ref.cells), 1e-5);
  EXPECT_NEAR(run.grid->norm(), ref.norm, 1e-9 * std::abs(ref.norm));
  EXPECT_EQ(run.grid->skipped(), ref.skipped);
  EXPECT_EQ(run.grid->gridded(), ref.gridded);
  EXPECT_EQ(run.work.visibilities, double(ref.gridded));
  EXPECT_EQ(run.work.updates, ref.updates);
}

// grid.serial, and grid.tiled with each tiling, against the reference.
void check_gridders(std::shared_ptr<const KernelStack> ks, const Blocks& blocks, const std::vector<Tiling>& tilings) {
  const RefGrid ref = ref_grid(*ks, blocks);
  ASSERT_GT(ref.gridded, 0);
  {
    SCOPED_TRACE("grid.serial");
    expect_matches(run_gridder(grid_serial::spec(), "cpu", ks, blocks), ref);
  }
  for (Tiling t : tilings)
    for (const char* accumulate : {"float", "double"})
      for (int threads : {1, 2, 8}) {
        t.accumulate = accumulate;
        SCOPED_TRACE("grid.tiled, " + t.str() + ", " + std::to_string(threads) + " threads");
        expect_matches(run_tiled(ks, blocks, t, threads), ref);
      }
}

const std::vector<Tiling> kTilings = {{64, 64, 2}, {16, 16, -1}, {8, 16, 1}, {7, 13, 0}, {16, 16, 100000}};

std::vector<VisAt> concat(std::vector<VisAt> a, const std::vector<VisAt>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ------------------------------------------------------------------------------------- gridders

TEST(GridSerialTiled, OnePointIsTheKernel) {
  // One visibility on a cell centre (offsets 0) in plane p with w > 0: the grid around it holds
  // vis * weight * conj(K_p[|j o|][|k o|]), written out here from the quarter kernel.
  std::mt19937_64 rng(5);
  auto ks = random_kernel_stack(rng, 4, 3, 4, 32);
  const int p = 3, s = ks->support[p], o = ks->oversample, size = ks->half_size(p), n = 32;
  const cfloat value(2, -1);
  const float weight = 0.5f;
  Blocks blocks = {make_block(*ks, {{3, -2, plane_w(*ks, p, +1), value, weight}})};
  std::vector<cdouble> expect(std::size_t(n) * n, 0.0);
  for (int j = -s; j <= s; ++j)
    for (int k = -s; k <= s; ++k)
      expect[std::size_t(n / 2 - 2 + j) * n + n / 2 + 3 + k] =
          cdouble(value) * double(weight) *
          std::conj(cdouble(ks->quarter[ks->quarter_start[p] + std::abs(j * o) * size + std::abs(k * o)]));
  const RefGrid ref = ref_grid(*ks, blocks);
  ASSERT_EQ(ref.gridded, 1);
  for (std::size_t i = 0; i < expect.size(); ++i) ASSERT_LT(std::abs(ref.cells[i] - expect[i]), 1e-12) << "cell " << i;
  check_gridders(ks, blocks, kTilings);
}

TEST(GridSerialTiled, FixedSmallCase) {
  // Hand-placed visibilities: cell centres, rounding ties (x.5 and offsets of exactly half a
  // sub-cell), w of both signs and past the last plane, two footprints off the grid.
  std::mt19937_64 rng(11);
  auto ks = random_kernel_stack(rng, 3, 3, 4, 32, 100);
  ks->geom.cell_rad = 1.0 / 32;  // scale 1: uu = -pos_u exactly, so the ties are exact
  const int s2 = ks->support[2];
  const std::vector<VisAt> v = {{0, 0, 0},
                                {3.25, -2.5, plane_w(*ks, 1, +1)},
                                {-5.125, 4.375, plane_w(*ks, 2, -1), {0.5f, 2}, 3},
                                {2.5, -2.5, plane_w(*ks, 1, -1)},
                                {6.875, 1.125, 150, {-1, 1}, 0.25f},
                                {-1.625, -7.5, -150},
                                {double(15 - s2), 0, 1000},      // footprint ends on the last column
                                {double(16 - s2), 0, -1000},     // one column past it: skipped
                                {0, double(-16 + s2), -1000},    // starts on the first row
                                {0, double(-17 + s2), 1000}};    // one row before it: skipped
  Blocks blocks = {make_block(*ks, v)};
  EXPECT_EQ(ref_grid(*ks, blocks).skipped, 2);
  check_gridders(ks, blocks, kTilings);
}

TEST(GridSerialTiled, RandomInputs) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> planes(1, 16), support(1, 10), oversample(1, 4), grid(3, 8);
    auto ks = random_kernel_stack(rng, planes(rng), support(rng), 2 * oversample(rng), 16 * grid(rng));
    check_gridders(ks, {make_block(*ks, random_vis(rng, *ks, 20000))}, kTilings);
  }
}

TEST(GridSerialTiled, GridEdges) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 8, 6, 4, 64);
    std::int64_t outside = 0;
    Blocks blocks = {make_block(*ks, edge_vis(rng, *ks, &outside))};
    EXPECT_EQ(ref_grid(*ks, blocks).skipped, outside);
    check_gridders(ks, blocks, kTilings);
  }
}

TEST(GridSerialTiled, BothSignsOfW) {
  // Unit visibilities at the same places with w and -w: the grids are exact conjugates.
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 10, 5, 4, 64);
    std::vector<VisAt> positive = random_vis(rng, *ks, 3000), negative;
    for (auto& x : positive) {
      x.ww = std::max(std::abs(x.ww), plane_w(*ks, 1, 1));
      x.vis = 1;
      x.weight = 1;
      negative.push_back(x);
      negative.back().ww = -x.ww;
    }
    Blocks pos = {make_block(*ks, positive)}, neg = {make_block(*ks, negative)};
    check_gridders(ks, pos, {{32, 32, 1}});
    check_gridders(ks, neg, {{32, 32, 1}});
    auto expect_conjugate = [](const Grid& a, const Grid& b) {
      for (std::size_t i = 0; i < a.cells.size(); ++i) ASSERT_EQ(a.cells[i], std::conj(b.cells[i])) << "cell " << i;
    };
    expect_conjugate(*run_gridder(grid_serial::spec(), "cpu", ks, pos).grid, *run_gridder(grid_serial::spec(), "cpu", ks, neg).grid);
    expect_conjugate(*run_tiled(ks, pos, {32, 32, -1}).grid, *run_tiled(ks, neg, {32, 32, -1}).grid);
  }
}

TEST(GridSerialTiled, DenseCore) {
  // Thousands of visibilities in one cell at the centre and in one next to it: the hot tiles
  // NAG's central box is for.
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 12, 7, 4, 128);
    auto v = concat(concat(hot_cell_vis(rng, *ks, 6000, 0, 0), hot_cell_vis(rng, *ks, 3000, 9, -4)),
                    random_vis(rng, *ks, 4000));
    std::shuffle(v.begin(), v.end(), rng);
    check_gridders(ks, {make_block(*ks, v)}, {{64, 64, 2}, {64, 64, -1}, {8, 8, 0}, {8, 8, 3}, {16, 16, 100000}});
  }
}

// grid.serial's accumulate: double against the independent double-precision loop on a cell that
// 200,000 visibilities pile into: only the final rounding to float is left (relative Frobenius norm
// below 1e-7), where Listing 1's float sums drift by far more (checked too, so the test can tell).
TEST(GridSerialTiled, SerialAccumulateDoubleLeavesOnlyTheFinalRounding) {
  for (auto seed : test::seeds(20261125ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 6, 5, 4, 64);
    auto v = concat(hot_cell_vis(rng, *ks, 200000, 0, 0), random_vis(rng, *ks, 2000));
    std::shuffle(v.begin(), v.end(), rng);
    const Blocks blocks = {make_block(*ks, std::vector<VisAt>(v.begin(), v.begin() + 100000), 0),
                           make_block(*ks, std::vector<VisAt>(v.begin() + 100000, v.end()), 1)};
    const RefGrid ref = ref_grid(*ks, blocks);
    const GridRun wide = run_gridder(grid_serial::spec(), "cpu", ks, blocks, {{"accumulate", std::string("double")}}),
                  narrow = run_gridder(grid_serial::spec(), "cpu", ks, blocks, {{"accumulate", std::string("float")}});
    expect_matches(wide, ref);
    const double wide_error = relative_frobenius(*wide.grid, ref.cells), narrow_error = relative_frobenius(*narrow.grid, ref.cells);
    EXPECT_LT(wide_error, 1e-7);
    EXPECT_GT(narrow_error, 10 * wide_error);
    std::printf("grid.serial on a 200,000-visibility cell: accumulate double %.2e, float %.2e from the double loop\n",
                wide_error, narrow_error);
  }
}

// The grid is the same bit for bit on any number of threads (the central box used to be summed
// from per-thread copies in whichever order the threads ran: runs differed by about 1e-5).
TEST(GridSerialTiled, DenseCoreIsBitForBitTheSameOnAnyThreadCount) {
  for (auto seed : test::seeds(20261124ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 12, 7, 4, 128);
    auto v = concat(hot_cell_vis(rng, *ks, 20000, 0, 0), random_vis(rng, *ks, 4000));
    std::shuffle(v.begin(), v.end(), rng);
    const Blocks blocks = {make_block(*ks, v)};
    const GridRun one = run_tiled(ks, blocks, {16, 16, 2}, 1);
    for (int threads : {2, 3, 8}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      const GridRun many = run_tiled(ks, blocks, {16, 16, 2}, threads);
      ASSERT_EQ(one.grid->cells.size(), many.grid->cells.size());
      EXPECT_EQ(std::memcmp(one.grid->cells.data(), many.grid->cells.data(), one.grid->cells.size() * sizeof(cfloat)), 0);
    }
  }
}

TEST(GridSerialTiled, SeveralBlocksIntoOneGrid) {
  // Blocks of different sizes, one empty, one entirely off the grid, one already carrying skips.
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 9, 6, 4, 96);
    auto v = concat(random_vis(rng, *ks, 12000), hot_cell_vis(rng, *ks, 2000, 0, 0));
    std::shuffle(v.begin(), v.end(), rng);
    auto slice = [&](std::size_t a, std::size_t b) { return std::vector<VisAt>(v.begin() + a, v.begin() + b); };
    std::vector<VisAt> off_grid = {{500, 0, 0}, {0, -400, 10}, {-49, 0, -10}};
    auto carrying = make_block(*ks, slice(9000, 14000), 4);
    carrying->skipped = 17;
    Blocks blocks = {make_block(*ks, slice(0, 3000), 0), make_block(*ks, {}, 1), make_block(*ks, slice(3000, 9000), 2),
                     make_block(*ks, off_grid, 3), carrying};
    check_gridders(ks, blocks, {{64, 64, 2}, {16, 32, -1}, {16, 16, 100000}});
  }
}

TEST(GridSerialTiled, AccumulateDoubleSumsBlocksInDoubleAndRoundsOnce) {
  // Without a central box every cell belongs to one tile, which grids each block's share of the
  // cell in float: with accumulate: double, the grid of several blocks must be each block's grid
  // alone, summed in double in block order and rounded to float once (what makes a grid independent
  // of how the blocks are spread over MPI ranks). Summed in float, some cells of this dense core
  // differ (accumulate: float does).
  for (auto seed : test::seeds(20261124ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 9, 6, 4, 96);
    auto v = concat(random_vis(rng, *ks, 4000), hot_cell_vis(rng, *ks, 4000, 0, 0));
    std::shuffle(v.begin(), v.end(), rng);
    Blocks blocks;
    for (int b = 0; b < 8; ++b)
      blocks.push_back(make_block(*ks, std::vector<VisAt>(v.begin() + b * 1000, v.begin() + (b + 1) * 1000), b));
    const Tiling tiling{16, 16, -1, "double"};
    const GridRun all = run_tiled(ks, blocks, tiling, 2), all_float = run_tiled(ks, blocks, {16, 16, -1, "float"}, 2);
    std::vector<cdouble> sum(all.grid->cells.size());
    std::vector<cfloat> float_sum(sum.size());
    for (const auto& block : blocks) {
      const GridRun one = run_tiled(ks, {block}, tiling, 2);
      for (std::size_t i = 0; i < sum.size(); ++i) {
        sum[i] += cdouble(one.grid->cells[i]);
        float_sum[i] += one.grid->cells[i];
      }
    }
    std::size_t differ = 0, float_differs = 0, float_run_differs = 0;
    for (std::size_t i = 0; i < sum.size(); ++i) {
      differ += all.grid->cells[i] != cfloat(sum[i]);
      float_differs += float_sum[i] != cfloat(sum[i]);
      float_run_differs += all_float.grid->cells[i] != cfloat(sum[i]);
    }
    EXPECT_EQ(differ, 0u);
    EXPECT_GT(float_differs, 0u);  // the test can tell a float sum over blocks
    EXPECT_GT(float_run_differs, 0u);
  }
}

TEST(GridSerialTiled, UnitVisibilitiesSumToTheNorm) {
  // With vis = 1 and weight = 1 every update adds C, so sum Re(grid) = sum Re(C) = norm.
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 12, 8, 4, 128);
    auto v = concat(random_vis(rng, *ks, 10000), hot_cell_vis(rng, *ks, 3000, 0, 0));
    for (auto& x : v) x.vis = 1, x.weight = 1;
    Blocks blocks = {make_block(*ks, v)};
    auto sum_re = [](const Grid& g) {
      double sum = 0;
      for (const cfloat& c : g.cells) sum += c.real();
      return sum;
    };
    const GridRun serial = run_gridder(grid_serial::spec(), "cpu", ks, blocks), tiled = run_tiled(ks, blocks, {16, 16, 1});
    ASSERT_GT(serial.grid->norm(), 0);
    EXPECT_NEAR(sum_re(*serial.grid), serial.grid->norm(), 1e-6 * serial.grid->norm());
    EXPECT_NEAR(sum_re(*tiled.grid), tiled.grid->norm(), 1e-6 * tiled.grid->norm());
  }
}

TEST(GridSerialTiled, NoBlocksGiveAnEmptyGrid) {
  std::mt19937_64 rng(3);
  auto ks = random_kernel_stack(rng, 2, 2, 4, 16);
  for (const GridRun& run : {run_gridder(grid_serial::spec(), "cpu", ks, {}), run_tiled(ks, {}, {})}) {
    ASSERT_EQ(run.grid->cells.size(), 16u * 16u);
    EXPECT_TRUE(std::all_of(run.grid->cells.begin(), run.grid->cells.end(), [](cfloat c) { return c == cfloat(0); }));
    EXPECT_EQ(run.grid->norm(), 0);
    EXPECT_EQ(run.grid->gridded(), 0);
  }
}

// ------------------------------------------------------------------------------ w-sort and tiles

// The Morton index of (u, v), bit by bit: bit b of u at 2b, of v at 2b + 1.
std::uint64_t morton_reference(int u, int v) {
  std::uint64_t m = 0;
  for (int b = 0; b < 32; ++b)
    m |= std::uint64_t(std::uint32_t(u) >> b & 1) << (2 * b) | std::uint64_t(std::uint32_t(v) >> b & 1) << (2 * b + 1);
  return m;
}

TEST(UvwWSort, PlacesEachVisibilityAndSortsStablyByPlane) {
  for (auto seed : test::seeds(20240611ULL))
    for (const std::string within : {"input", "cell"}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", within_plane " + within);
      std::mt19937_64 rng(seed);
      auto ks = random_kernel_stack(rng, 20, 8, 4, 96);
      std::int64_t outside = 0;
      auto v = concat(random_vis(rng, *ks, 50000), edge_vis(rng, *ks, &outside));
      std::shuffle(v.begin(), v.end(), rng);
      auto in = make_block(*ks, v, 7);
      in->skipped = 5;
      StageHarness sort(uvw_w_sort::spec(), "cpu", {{"within_plane", within}});
      sort.set_input("kernels", ks);
      sort.process({{"vis", in}});
      const auto out = sort.output<VisBlock>("vis", 0);

      // Expected: the visibilities inside the grid, stably sorted by plane (and within a plane by the
      // Morton index of the cell for within_plane cell), then those outside it in input order, with
      // plane -1 (the block keeps its size; `skipped` stays the input's).
      std::vector<std::size_t> kept, outside_at;
      std::vector<RefPlacement> where(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        where[i] = ref_place(in->uu[i], in->vv[i], in->ww[i], *ks);
        (where[i].inside ? kept : outside_at).push_back(i);
      }
      ASSERT_GE(std::int64_t(outside_at.size()), outside);  // random_vis may add some
      const bool cells = within == "cell";
      std::stable_sort(kept.begin(), kept.end(), [&](auto a, auto b) {
        const RefPlacement &p = where[a], &q = where[b];
        if (p.plane != q.plane) return p.plane < q.plane;
        return cells && morton_reference(p.u, p.v) < morton_reference(q.u, q.v);
      });
      ASSERT_EQ(out->size(), v.size());
      EXPECT_EQ(out->skipped, 5);
      EXPECT_EQ(out->index, 7);
      EXPECT_EQ(out->grid_size, ks->geom.grid_size);
      EXPECT_TRUE(out->placed());
      EXPECT_EQ(out->cell_order, cells);
      for (std::size_t d = 0; d < v.size(); ++d) {
        const bool inside = d < kept.size();
        const std::size_t i = inside ? kept[d] : outside_at[d - kept.size()];
        const RefPlacement& p = where[i];
        const GridCoord& c = out->coords[d];
        ASSERT_EQ(out->uu[d], in->uu[i]) << d;
        ASSERT_EQ(out->vv[d], in->vv[i]) << d;
        ASSERT_EQ(out->ww[d], in->ww[i]) << d;
        ASSERT_EQ(out->vis[d], in->vis[i]) << d;
        ASSERT_EQ(out->weight[d], in->weight[i]) << d;
        if (!inside) {
          ASSERT_EQ(c.plane, -1) << d;
          continue;
        }
        ASSERT_EQ(c.u, p.u) << d;
        ASSERT_EQ(c.v, p.v) << d;
        ASSERT_EQ(c.plane, p.plane) << d;
        ASSERT_EQ(c.off_u, p.off_u) << d;
        ASSERT_EQ(c.off_v, p.off_v) << d;
        ASSERT_EQ(bool(c.conj), p.conj) << d;
        ASSERT_EQ(c.support, p.support) << d;
      }
    }
}

TEST(UvwWSort, RejectsNonFiniteUvw) {
  std::mt19937_64 rng(1);
  auto ks = random_kernel_stack(rng, 2, 2, 4, 32);
  auto b = make_block(*ks, {{0, 0, 0}, {1, 1, 0}});
  b->ww[1] = std::nanf("");
  StageHarness h(uvw_w_sort::spec(), "cpu");
  h.set_input("kernels", ks);
  EXPECT_THROW(h.process({{"vis", b}}), InputError);
}

// Does the footprint of c meet tile t of layout l? Written from the layout's definition.
bool meets(const TileLayout& l, std::int64_t t, const GridCoord& c) {
  const int u0 = l.origin_u + int(t % l.ntiles_u) * l.tile_u, v0 = l.origin_v + int(t / l.ntiles_u) * l.tile_v;
  return c.plane >= 0 && c.u + c.support >= u0 && c.u - c.support < u0 + l.tile_u && c.v + c.support >= v0 &&
         c.v - c.support < v0 + l.tile_v;
}

TEST(TilesCountBucketSort, BoxLayoutAndCountsMatchBruteForce) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 10, 6, 4, 128);
    const int centre = ks->geom.centre();
    // Two blocks: a spread one and a small off-centre clump (its box misses the grid centre).
    auto clump = hot_cell_vis(rng, *ks, 300, -40, 30);
    Blocks blocks = {make_block(*ks, random_vis(rng, *ks, 4000), 0), make_block(*ks, clump, 1), make_block(*ks, {}, 2)};
    for (const Tiling& t : {Tiling{64, 64}, Tiling{16, 8}, Tiling{7, 13}, Tiling{1, 1}}) {
      SCOPED_TRACE(t.str());
      const Chain c = run_chain(ks, blocks, t);
      for (std::size_t b = 0; b < blocks.size(); ++b) {
        const VisBlock& vis = *c.placed[b];
        const BoundingBox& box = *c.boxes[b];
        const TileLayout& l = c.counts[b]->layout;
        EXPECT_EQ(box.index, vis.index);
        EXPECT_EQ(c.counts[b]->index, vis.index);
        // The box, from the reference placement.
        int u_min = INT_MAX, u_max = INT_MIN, v_min = INT_MAX, v_max = INT_MIN;
        for (std::size_t i = 0; i < blocks[b]->size(); ++i) {
          const RefPlacement p = ref_place(blocks[b]->uu[i], blocks[b]->vv[i], blocks[b]->ww[i], *ks);
          if (!p.inside) continue;
          u_min = std::min(u_min, p.u - p.support);
          u_max = std::max(u_max, p.u + p.support);
          v_min = std::min(v_min, p.v - p.support);
          v_max = std::max(v_max, p.v + p.support);
        }
        if (u_min > u_max) {  // nothing on the grid (off-grid visibilities stay in the block)
          EXPECT_TRUE(box.empty());
          EXPECT_EQ(l.count(), 0);
          continue;
        }
        EXPECT_EQ(box.u_min(), u_min);
        EXPECT_EQ(box.u_max(), u_max);
        EXPECT_EQ(box.v_min(), v_min);
        EXPECT_EQ(box.v_max(), v_max);
        // The layout: fixed alignment, the smallest covering the box, centre tile holds the centre.
        EXPECT_EQ(l.tile_u, t.tile_u);
        EXPECT_EQ(l.tile_v, t.tile_v);
        EXPECT_EQ(((l.origin_u - (centre - t.tile_u / 2)) % t.tile_u + t.tile_u) % t.tile_u, 0);
        EXPECT_EQ(((l.origin_v - (centre - t.tile_v / 2)) % t.tile_v + t.tile_v) % t.tile_v, 0);
        EXPECT_LE(l.origin_u, u_min);
        EXPECT_GT(l.origin_u + t.tile_u, u_min);
        EXPECT_LE(l.origin_v, v_min);
        EXPECT_GT(l.origin_v + t.tile_v, v_min);
        EXPECT_GE(l.origin_u + l.ntiles_u * t.tile_u - 1, u_max);
        EXPECT_LE(l.origin_u + (l.ntiles_u - 1) * t.tile_u, u_max);
        EXPECT_GE(l.origin_v + l.ntiles_v * t.tile_v - 1, v_max);
        EXPECT_LE(l.origin_v + (l.ntiles_v - 1) * t.tile_v, v_max);
        EXPECT_LE(l.origin_u + l.centre_u * t.tile_u, centre);
        EXPECT_GT(l.origin_u + (l.centre_u + 1) * t.tile_u, centre);
        EXPECT_LE(l.origin_v + l.centre_v * t.tile_v, centre);
        EXPECT_GT(l.origin_v + (l.centre_v + 1) * t.tile_v, centre);
        // Counts and buckets: every (visibility, tile) pair that meets, once, ascending per tile.
        const TileBuckets& buckets = *c.buckets[b];
        ASSERT_EQ(buckets.offsets.size(), std::size_t(l.count()) + 1);
        EXPECT_EQ(buckets.offsets[0], 0);
        EXPECT_EQ(buckets.vis.coords.data(), vis.coords.data());
        for (std::int64_t tile = 0; tile < l.count(); ++tile) {
          std::vector<std::int32_t> expect;
          for (std::size_t i = 0; i < vis.size(); ++i)
            if (meets(l, tile, vis.coords[i])) expect.push_back(std::int32_t(i));
          ASSERT_EQ(c.counts[b]->counts[tile], std::int32_t(expect.size())) << "tile " << tile;
          ASSERT_EQ(buckets.offsets[tile + 1] - buckets.offsets[tile], std::int64_t(expect.size())) << "tile " << tile;
          ASSERT_TRUE(std::equal(expect.begin(), expect.end(), buckets.entries.begin() + buckets.offsets[tile]))
              << "tile " << tile;
        }
      }
    }
  }
}

TEST(TilesCountBucketSort, SortingIsTheSameWhateverTheThreadCount) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 30, 6, 4, 256);
    // Several chunks of w_sort and bucket_sort, and a dense core to make chunks meet in tiles.
    auto v = concat(random_vis(rng, *ks, 120000), hot_cell_vis(rng, *ks, 30000, 0, 0));
    std::shuffle(v.begin(), v.end(), rng);
    Blocks blocks = {make_block(*ks, v)};
    tbb::global_control allow(tbb::global_control::max_allowed_parallelism, 6);
    auto in_arena = [&](int threads) {
      Chain c;
      tbb::task_arena(threads).execute([&] { c = run_chain(ks, blocks, {16, 16}); });
      return c;
    };
    const Chain one = in_arena(1);
    for (int threads : {2, 6}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      const Chain many = in_arena(threads);
      const VisBlock &a = *one.placed[0], &b = *many.placed[0];
      ASSERT_EQ(a.size(), b.size());
      EXPECT_TRUE(std::equal(a.uu.begin(), a.uu.end(), b.uu.begin()));
      EXPECT_TRUE(std::equal(a.vis.begin(), a.vis.end(), b.vis.begin()));
      EXPECT_EQ(0, std::memcmp(a.coords.data(), b.coords.data(), a.size() * sizeof(GridCoord)));
      const TileBuckets &x = *one.buckets[0], &y = *many.buckets[0];
      ASSERT_EQ(x.entries.size(), y.entries.size());
      EXPECT_TRUE(std::equal(x.offsets.begin(), x.offsets.end(), y.offsets.begin()));
      EXPECT_TRUE(std::equal(x.entries.begin(), x.entries.end(), y.entries.begin()));
    }
  }
}

TEST(TilesCountBucketSort, InputsFromDifferentBlocksAreRejected) {
  std::mt19937_64 rng(2);
  auto ks = random_kernel_stack(rng, 4, 4, 4, 64);
  const Chain a = run_chain(ks, {make_block(*ks, random_vis(rng, *ks, 500), 0)}, {16, 16});
  const Chain b = run_chain(ks, {make_block(*ks, random_vis(rng, *ks, 500), 0)}, {16, 16});
  StageHarness bucket(tiles_bucket_sort::spec(), "cpu");
  EXPECT_THROW(bucket.process({{"vis", a.placed[0]}, {"counts", b.counts[0]}}), InputError);
  StageHarness count(tiles_count::spec(), "cpu", {{"tile_u", std::int64_t(16)}, {"tile_v", std::int64_t(16)}});
  auto moved = std::make_shared<BoundingBox>(*a.boxes[0]);
  moved->range = Array<std::int32_t>::host(4);  // a box of its own, not the shared one
  std::copy(a.boxes[0]->range.begin(), a.boxes[0]->range.end(), moved->range.begin());
  moved->range[0] = moved->range[1];  // u_min = u_max: one column of tiles
  EXPECT_THROW(count.process({{"vis", a.placed[0]}, {"box", moved}}), InputError);
  StageHarness box(uvw_bounding_box::spec(), "cpu");
  EXPECT_THROW(box.process({{"vis", make_block(*ks, random_vis(rng, *ks, 10))}}), InputError);  // not placed
  // Kernels for another grid than the block was placed on.
  StageHarness tiled(grid_tiled::spec(), "cpu");
  tiled.set_input("kernels", random_kernel_stack(rng, 4, 4, 4, 128));
  EXPECT_THROW(tiled.process({{"buckets", a.buckets[0]}}), InputError);
}

}  // namespace
