// grid.atomic, cpu backend, against the double-precision Listing 1 of tests/support/
// reference_gridder (its own placement, plane offsets and norm, nothing shared with the stage).
// Fixed and fresh random seeds; random kernels, edge visibilities, both signs of w, thousands of
// visibilities in one cell, unit visibilities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "stages/grid/atomic.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/reference_gridder.hpp"
#include "tests/support/seeds.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;


GridRun grid_cpu(std::shared_ptr<const KernelStack> ks, const Blocks& blocks) {
  return run_gridder(grid_atomic::spec(), "cpu", std::move(ks), blocks);
}

// The stage's grid, totals and work equal Listing 1's.
RefGrid expect_matches_listing1(const std::shared_ptr<const KernelStack>& ks, const Blocks& blocks) {
  const GridRun run = grid_cpu(ks, blocks);
  const RefGrid ref = ref_grid(*ks, blocks);
  const Grid& g = *run.grid;
  EXPECT_EQ(g.geom, ks->geom);
  EXPECT_LT(relative_frobenius(g, ref.cells), 1e-5);
  EXPECT_NEAR(g.norm(), ref.norm, 1e-9 * std::abs(ref.norm));
  EXPECT_EQ(g.gridded(), ref.gridded);
  EXPECT_EQ(g.skipped(), ref.skipped);
  std::size_t n = 0;
  for (auto& b : blocks) n += b->size();
  EXPECT_EQ(run.work.visibilities, double(n));
  EXPECT_EQ(run.work.updates, ref.updates);
  return ref;
}

struct Shape {
  int planes, max_support, oversample, grid_size;
  std::size_t vis_per_block;
};

}  // namespace

TEST(GridAtomicSpec, DeclaresPortsAndBackends) {
  const StageSpec s = grid_atomic::spec();
  EXPECT_EQ(s.type, "grid.atomic");
  ASSERT_NE(s.input("vis"), nullptr);
  EXPECT_EQ(s.input("vis")->arity, Arity::stream);
  ASSERT_NE(s.input("kernels"), nullptr);
  EXPECT_EQ(s.input("kernels")->arity, Arity::once);
  ASSERT_NE(s.output("grid"), nullptr);
  EXPECT_EQ(s.output("grid")->arity, Arity::once);
  ASSERT_FALSE(s.backends.empty());
  EXPECT_EQ(s.backends.front().name, "cpu");
  EXPECT_NE(s.backend("cuda"), nullptr);  // declared in builds without CUDA too
}

TEST(GridAtomicCpu, RandomBlocksMatchListing1) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (const Shape& sh : {Shape{16, 8, 4, 256, 20000}, Shape{5, 40, 8, 512, 3000}, Shape{1, 3, 2, 64, 5000}}) {
      SCOPED_TRACE("planes " + std::to_string(sh.planes) + ", max support " + std::to_string(sh.max_support) +
                   ", oversample " + std::to_string(sh.oversample));
      auto ks = random_kernel_stack(rng, sh.planes, sh.max_support, sh.oversample, sh.grid_size);
      // Three blocks, the middle one empty: the grid accumulates over the stream.
      const Blocks blocks{make_block(*ks, random_vis(rng, *ks, sh.vis_per_block), 0), make_block(*ks, {}, 1),
                          make_block(*ks, random_vis(rng, *ks, sh.vis_per_block / 3), 2)};
      const RefGrid ref = expect_matches_listing1(ks, blocks);
      EXPECT_GT(ref.gridded, 0);
      EXPECT_GT(ref.skipped, 0);
    }
  }
}

TEST(GridAtomicCpu, EdgeVisibilitiesAreGriddedOrSkippedExactly) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 8, 12, 4, 128);
    std::int64_t outside = 0;
    const auto vis = edge_vis(rng, *ks, &outside);
    const RefGrid ref = expect_matches_listing1(ks, {make_block(*ks, vis)});
    EXPECT_EQ(ref.skipped, outside);
    EXPECT_EQ(ref.gridded, std::int64_t(vis.size()) - outside);
  }
}

TEST(GridAtomicCpu, ThousandsOfVisibilitiesInOneCell) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 6, 6, 4, 96);
    const RefGrid ref =
        expect_matches_listing1(ks, {make_block(*ks, hot_cell_vis(rng, *ks, 20000, 3, -2), 0),
                                     make_block(*ks, hot_cell_vis(rng, *ks, 5000, 3, -2), 1)});
    EXPECT_EQ(ref.gridded, 25000);
  }
}

TEST(GridAtomicCpu, PositiveWConjugatesTheKernel) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 4, 5, 4, 64);
    std::uniform_real_distribution<double> frac(-0.45, 0.45);
    const double pu = 2 + frac(rng), pv = -1 + frac(rng);
    // Same place and plane, opposite signs of w (plane 0: w = 0 is not conjugated, a tiny w > 0 is).
    for (auto [minus, plus] : {std::pair{-plane_w(*ks, 3, 1), plane_w(*ks, 3, 1)}, std::pair{0.0, 1e-6}}) {
      const auto gm = grid_cpu(ks, {make_block(*ks, {{pu, pv, minus}})}).grid;
      const auto gp = grid_cpu(ks, {make_block(*ks, {{pu, pv, plus}})}).grid;
      double imag = 0;
      for (std::size_t i = 0; i < gm->cells.size(); ++i) {
        ASSERT_EQ(gp->cells[i], std::conj(gm->cells[i])) << "cell " << i;
        imag += std::abs(gm->cells[i].imag());
      }
      EXPECT_GT(imag, 0);  // the kernels are complex, so conjugation shows
    }
  }
}

TEST(GridAtomicCpu, UnitVisibilitiesSumToNorm) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 10, 10, 4, 200);
    auto vis = random_vis(rng, *ks, 10000);
    for (auto& v : vis) v.vis = 1, v.weight = 1;
    const auto g = grid_cpu(ks, {make_block(*ks, vis)}).grid;
    double sum = 0;
    for (const cfloat& c : g->cells) sum += c.real();
    EXPECT_GT(g->norm(), 0);
    EXPECT_NEAR(sum, g->norm(), 1e-5 * g->norm());
  }
}

TEST(GridAtomicCpu, NoBlocksGiveAnEmptyGrid) {
  std::mt19937_64 rng(7);
  auto ks = random_kernel_stack(rng, 3, 4, 4, 32);
  const auto g = grid_cpu(ks, {}).grid;
  EXPECT_EQ(g->geom, ks->geom);
  ASSERT_EQ(g->cells.size(), 32u * 32u);
  EXPECT_TRUE(std::all_of(g->cells.begin(), g->cells.end(), [](cfloat c) { return c == cfloat(0); }));
  EXPECT_EQ(g->norm(), 0);
  EXPECT_EQ(g->gridded(), 0);
  EXPECT_EQ(g->skipped(), 0);
}

TEST(GridAtomicCpu, RejectsInconsistentInputs) {
  std::mt19937_64 rng(11);
  auto ks = random_kernel_stack(rng, 3, 4, 4, 32);
  auto expect_input_error = [&](std::shared_ptr<const KernelStack> k, std::shared_ptr<const VisBlock> b,
                                const std::string& words) {
    try {
      grid_cpu(std::move(k), {std::move(b)});
      ADD_FAILURE() << "no error; expected one about " << words;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  auto short_uu = make_block(*ks, random_vis(rng, *ks, 10));
  short_uu->uu = Array<float>::host(9);
  expect_input_error(ks, short_uu, "uu");

  auto odd = std::make_shared<KernelStack>(*ks);
  odd->oversample = 3;
  expect_input_error(odd, make_block(*ks, random_vis(rng, *ks, 10)), "oversample");

  auto few_planes = std::make_shared<KernelStack>(*ks);
  few_planes->planes = 2;
  expect_input_error(few_planes, make_block(*ks, random_vis(rng, *ks, 10)), "support");

  auto nan = make_block(*ks, random_vis(rng, *ks, 10));
  nan->uu[4] = std::numeric_limits<float>::quiet_NaN();
  expect_input_error(ks, nan, "visibility 4");
}

// The uvflow variant is a cuda design: the cpu backend refuses it rather than run Listing 9 instead.
TEST(GridAtomicCpu, RefusesTheCudaVariant) {
  std::mt19937_64 rng(11);
  auto ks = random_kernel_stack(rng, 3, 4, 4, 64);
  EXPECT_THROW(run_gridder(grid_atomic::spec(), "cpu", ks, {make_block(*ks, random_vis(rng, *ks, 10))},
                           {{"variant", std::string("uvflow")}}),
               ParamError);
}

// accumulate: double sums every update in double and rounds once: on a cell that takes a hundred
// thousand adds it stays at the float products' rounding, where float sums drift far more. With
// float sums, double_box (default 64 cells) does the same for the central cells, where the hot
// cell lies.
TEST(GridAtomicCpu, DoubleSumsStayAtTheProductsRounding) {
  for (auto seed : test::seeds(20261125ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = random_kernel_stack(rng, 6, 6, 4, 96);
    const Blocks blocks{make_block(*ks, hot_cell_vis(rng, *ks, 100000, 3, -2), 0),
                        make_block(*ks, random_vis(rng, *ks, 20000), 1)};
    const RefGrid ref = ref_grid(*ks, blocks);
    auto run = [&](std::map<std::string, ParamValue> params) { return run_gridder(grid_atomic::spec(), "cpu", ks, blocks, std::move(params)); };
    const GridRun in_float = run({{"double_box", std::int64_t(0)}});
    const GridRun in_box = run({});
    const GridRun in_double = run({{"accumulate", std::string("double")}});
    const double e_float = relative_frobenius(*in_float.grid, ref.cells);
    const double e_box = relative_frobenius(*in_box.grid, ref.cells);
    const double e_double = relative_frobenius(*in_double.grid, ref.cells);
    std::printf("relative Frobenius from Listing 1 in double: float sums %.3g, central box in double %.3g, "
                "double sums %.3g\n", e_float, e_box, e_double);
    EXPECT_LT(e_double, 2e-7);
    EXPECT_LT(e_box, 2e-7);
    EXPECT_GT(e_float, 10 * e_double);
    EXPECT_GT(e_float, 10 * e_box);
    for (const GridRun* r : {&in_box, &in_double}) {
      EXPECT_NEAR(r->grid->norm(), ref.norm, 1e-9 * std::abs(ref.norm));
      EXPECT_EQ(r->grid->gridded(), ref.gridded);
      EXPECT_TRUE(r->grid->cells64.empty());  // one process: the double grid is not kept
    }
  }
}
