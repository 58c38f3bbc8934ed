// uvw.weight_density and uvw.weighting (cpu backends) against an independent double-precision
// implementation of WSClean 3.1's ImageWeights (written here from its definitions: padded grid
// size, v >= 0 half plane, floor cells, uniform 1/W_k, Briggs f^2, the rank filter), on hand-made
// cases and on fixed and fresh random blocks; the properties the definitions imply (uniform weights
// sum to 1 per cell, Briggs tends to uniform and to natural); errors; and a pipeline that reads the
// data twice. tests/wsclean_test.cpp checks the same weights against WSClean's own.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/shared/weighting.hpp"
#include "stages/uvw/weight_density.hpp"
#include "stages/uvw/weighting.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/weighting_cases.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;


// WSClean 3.1's weighting, in double precision, written from its definitions (ImageWeights:
// Grid, FinishGridding, RankFilter with windowMean's loop over the window).
struct Reference {
  int width = 0;
  double cell = 0;
  std::vector<double> grid;  // [y][x], y in [0, width/2): the summed weights
  double total = 0;          // sum of the weights inside the grid

  Reference(int image_size, double cell_rad, double padding) : cell(cell_rad) {
    long padded = long(std::ceil(image_size * padding));
    while (padded % 4) ++padded;
    width = int(padded);
    grid.assign(std::size_t(width) * (width / 2), 0.0);
  }
  // The cell of (u, v) or -1: the half plane v >= 0, cells 1 / (width * cell) wavelengths wide,
  // u = 0 at the left edge of column width/2.
  long cell_of(double u, double v) const {
    if (v < 0) u = -u, v = -v;
    const double du = 1.0 / (width * cell);
    const long x = long(std::floor(u / du)) + width / 2, y = long(std::floor(v / du));
    if (x < 0 || x >= width || y >= width / 2) return -1;
    return y * width + x;
  }
  void add(const Blocks& blocks) {
    for (auto& b : blocks)
      for (std::size_t i = 0; i < b->size(); ++i)
        if (long k = cell_of(b->uu[i], b->vv[i]); k >= 0) grid[k] += b->weight[i], total += b->weight[i];
  }
  double sum_of_squares() const {
    double s = 0;
    for (double g : grid) s += g * g;
    return s;
  }
  // The weight of every cell: uniform 1/W (0 where empty), briggs 1/(1 + f^2 W) everywhere; then
  // values above level x the mean of the nonzero values in [x - d, x + d) x [y - d, y + d) are
  // clipped to that bound (level 0: no filter).
  std::vector<double> cell_weights(const std::string& mode, double robust, double level, int size) const {
    const double f2 = std::pow(5 * std::pow(10.0, -robust), 2) / (sum_of_squares() / total);
    std::vector<double> w(grid.size());
    for (std::size_t k = 0; k < grid.size(); ++k)
      w[k] = mode == "uniform" ? (grid[k] == 0 ? 0 : 1 / grid[k]) : 1 / (1 + f2 * grid[k]);
    if (level == 0) return w;
    std::vector<double> out = w;
    const int rows = width / 2, d = size / 2;
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < width; ++x) {
        const double v = w[std::size_t(y) * width + x];
        if (v == 0) continue;
        double sum = 0;
        int count = 0;
        for (int yy = std::max(0, y - d); yy < std::min(rows, y + d); ++yy)
          for (int xx = std::max(0, x - d); xx < std::min(width, x + d); ++xx)
            if (double c = w[std::size_t(yy) * width + xx]; c != 0) sum += c, ++count;
        if (v > level * sum / count) out[std::size_t(y) * width + x] = level * sum / count;
      }
    return out;
  }
};

struct Weighting {
  std::string mode;
  double robust = 0, rank_filter = 3;
  int rank_filter_size = 16;
  std::string str() const {
    return mode + " robust " + std::to_string(robust) + " rank filter " + std::to_string(rank_filter) + " / " +
           std::to_string(rank_filter_size);
  }
};

std::shared_ptr<const WeightDensity> density_of(const std::shared_ptr<KernelStack>& ks, const Blocks& blocks,
                                                double padding = 1.2) {
  StageHarness h(uvw_weight_density::spec(), "cpu", {{"padding", padding}});
  h.set_input("kernels", ks);
  for (auto& b : blocks) h.process({{"vis", b}});
  h.finish();
  EXPECT_EQ(h.outputs("density").size(), 1u);
  EXPECT_EQ(h.work().visibilities, [&] {
    double n = 0;
    for (auto& b : blocks) n += double(b->size());
    return n;
  }());
  return h.output<WeightDensity>("density");
}

Blocks weighted(const Weighting& wt, const std::shared_ptr<const WeightDensity>& d, const Blocks& blocks) {
  StageHarness h(uvw_weighting::spec(), "cpu",
                 {{"mode", wt.mode}, {"robust", wt.robust}, {"rank_filter", wt.rank_filter},
                  {"rank_filter_size", std::int64_t(wt.rank_filter_size)}});
  if (d) h.set_input("density", d);
  for (auto& b : blocks) h.process({{"vis", b}});
  h.finish();
  Blocks out;
  for (std::size_t i = 0; i < blocks.size(); ++i) out.push_back(h.output<VisBlock>("vis", i));
  return out;
}

void expect_density_matches(const WeightDensity& d, const Reference& ref) {
  ASSERT_EQ(d.geom.width, ref.width);
  ASSERT_EQ(d.cells.size(), ref.grid.size());
  ASSERT_EQ(d.totals.size(), 2u);
  std::size_t bad = 0;
  for (std::size_t k = 0; k < ref.grid.size(); ++k)
    if (std::abs(d.cells[k] - ref.grid[k]) > 1e-12 * std::max(1.0, ref.grid[k])) ++bad;
  EXPECT_EQ(bad, 0u) << "cells differing from the reference";
  EXPECT_NEAR(d.totals[0], ref.total, 1e-12 * ref.total);
  EXPECT_NEAR(d.totals[1], ref.sum_of_squares(), 1e-12 * ref.sum_of_squares());
}

void expect_weights_match(const Blocks& in, const Blocks& out, const Reference& ref, const Weighting& wt) {
  SCOPED_TRACE(wt.str());
  ASSERT_EQ(in.size(), out.size());
  const std::vector<double> cw =
      wt.mode == "natural" ? std::vector<double>{} : ref.cell_weights(wt.mode, wt.robust, wt.rank_filter, wt.rank_filter_size);
  for (std::size_t b = 0; b < in.size(); ++b) {
    ASSERT_EQ(out[b]->size(), in[b]->size());
    EXPECT_EQ(out[b]->index, in[b]->index);
    // Only the weights are new: the other arrays are the input's, shared.
    EXPECT_EQ(out[b]->uu.data(), in[b]->uu.data());
    EXPECT_EQ(out[b]->vis.data(), in[b]->vis.data());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < in[b]->size(); ++i) {
      const long k = ref.cell_of(in[b]->uu[i], in[b]->vv[i]);
      const double want = wt.mode == "natural" ? in[b]->weight[i] : k < 0 ? 0.0 : in[b]->weight[i] * cw[k];
      if (std::abs(out[b]->weight[i] - want) > 2e-7 * std::abs(want)) ++bad;
    }
    EXPECT_EQ(bad, 0u) << "block " << b << ": weights differing from the reference";
  }
}

}  // namespace

TEST(WeightingSpec, DeclaresPortsParametersAndBackends) {
  const StageSpec d = uvw_weight_density::spec();
  EXPECT_EQ(d.type, "uvw.weight_density");
  ASSERT_NE(d.input("vis"), nullptr);
  EXPECT_EQ(d.input("vis")->arity, Arity::stream);
  ASSERT_NE(d.input("kernels"), nullptr);
  EXPECT_EQ(d.input("kernels")->arity, Arity::once);
  ASSERT_NE(d.output("density"), nullptr);
  EXPECT_EQ(d.output("density")->arity, Arity::once);
  ASSERT_NE(d.param("padding"), nullptr);
  EXPECT_NE(d.backend("cuda"), nullptr);  // declared in builds without CUDA too

  const StageSpec w = uvw_weighting::spec();
  EXPECT_EQ(w.type, "uvw.weighting");
  ASSERT_NE(w.input("density"), nullptr);
  EXPECT_TRUE(w.input("density")->optional);
  EXPECT_EQ(w.input("density")->arity, Arity::once);
  ASSERT_NE(w.output("vis"), nullptr);
  EXPECT_EQ(w.output("vis")->arity, Arity::stream);
  ASSERT_NE(w.param("mode"), nullptr);
  EXPECT_EQ(w.param("mode")->choices, (std::vector<std::string>{"natural", "uniform", "briggs"}));
  ASSERT_NE(w.param("robust"), nullptr);
  ASSERT_NE(w.param("rank_filter"), nullptr);
  EXPECT_EQ(std::get<double>(*w.param("rank_filter")->def), 3.0);  // WSClean's default
  ASSERT_NE(w.param("rank_filter_size"), nullptr);
  EXPECT_EQ(std::get<std::int64_t>(*w.param("rank_filter_size")->def), 16);
  EXPECT_NE(w.backend("cuda"), nullptr);
}

// WSClean pads 1.2 x and rounds up to a multiple of 4.
TEST(WeightDensity, GridSizeIsWscleansPaddedImageSize) {
  EXPECT_EQ(weighting::wsclean_padded_size(512, 1.2), 616);
  EXPECT_EQ(weighting::wsclean_padded_size(256, 1.2), 308);
  EXPECT_EQ(weighting::wsclean_padded_size(128, 1.2), 156);
  EXPECT_EQ(weighting::wsclean_padded_size(100, 1.2), 120);
  EXPECT_EQ(weighting::wsclean_padded_size(1000, 1.0), 1000);
  EXPECT_EQ(weighting::wsclean_padded_size(2, 1.0), 4);
  EXPECT_EQ(weighting::wsclean_padded_size(4096, 1.5), 6144);
  auto ks = geometry_only_kernels(512, 20);
  const WeightGridGeometry g = weighting::weight_grid(*ks, 1.2);
  EXPECT_EQ(g.width, 616);
  EXPECT_EQ(g.cell_rad, ks->geom.cell_rad);
  EXPECT_EQ(g.cells(), 616 * 308);
}

// Cells worked out by hand: 4 x 4 pixels of 1/40 rad pad to a grid of 8 cells of 5 wavelengths,
// x = floor(u / 5) + 4, y = floor(v / 5), kept for x in [0, 8) and y in [0, 4).
TEST(WeightDensity, HandMadeCells) {
  auto ks = std::make_shared<KernelStack>();
  ks->geom = {4, 6, 1.0 / 40};
  const Blocks blocks{uv_block({{1, 1, 1.0f},      // (4, 0)
                                {4.9, 4.9, 2.0f},  // (4, 0)
                                {-1, -1, 3.0f},    // folded to (1, 1): (4, 0)
                                {-1, 1, 0.5f},     // (3, 0)
                                {7, 0, 1.0f},      // (5, 0)
                                {-7, 0, 1.0f},     // v = 0 is not folded: (2, 0)
                                {-19.9, 19.9, 4.0f},  // (0, 3)
                                {20, 1, 9.0f},     // x = 8: outside
                                {1, 20, 9.0f},     // y = 4: outside
                                {-1, -20, 9.0f}})};  // folded to y = 4: outside
  const auto d = density_of(ks, blocks, 1.2);  // ceil(4.8) = 5, rounded up to 8
  ASSERT_EQ(d->geom.width, 8);
  std::map<int, double> want{{4, 6.0}, {3, 0.5}, {5, 1.0}, {2, 1.0}, {3 * 8 + 0, 4.0}};
  for (int k = 0; k < 8 * 4; ++k) EXPECT_EQ(d->cells[k], want.count(k) ? want[k] : 0.0) << "cell " << k;
  EXPECT_DOUBLE_EQ(d->totals[0], 12.5);
  EXPECT_DOUBLE_EQ(d->totals[1], 36 + 0.25 + 1 + 1 + 16);

  // uniform: w / W; briggs R = 0: f^2 = 25 / (54.25 / 12.5); outside the grid: 0. WSClean's rank
  // filter (3 x the mean over a 16-cell window, here the whole grid) clips none of these.
  const std::vector<double> uniform{1 / 6., 2 / 6., 3 / 6., 1, 1, 1, 1, 0, 0, 0};
  const double f2 = 25 / (54.25 / 12.5);
  const std::vector<double> briggs{1 / (1 + 6 * f2), 2 / (1 + 6 * f2), 3 / (1 + 6 * f2), 0.5 / (1 + 0.5 * f2),
                                   1 / (1 + f2), 1 / (1 + f2), 4 / (1 + 4 * f2), 0, 0, 0};
  for (double rank_filter : {0.0, 3.0}) {
    SCOPED_TRACE("rank filter " + std::to_string(rank_filter));
    const auto u = weighted({"uniform", 0, rank_filter}, d, blocks)[0];
    const auto b = weighted({"briggs", 0, rank_filter}, d, blocks)[0];
    for (std::size_t i = 0; i < uniform.size(); ++i) {
      EXPECT_FLOAT_EQ(u->weight[i], float(uniform[i])) << "visibility " << i;
      EXPECT_FLOAT_EQ(b->weight[i], float(briggs[i])) << "visibility " << i;
    }
  }
  // At 1.5 x the mean of the nonzero uniform cell weights (1/6, 2, 1, 1, 1/4), the cell of weight
  // 2 is clipped: visibility 3 gets 0.5 x 1.5 x 4.41667 / 5.
  const auto clipped = weighted({"uniform", 0, 1.5}, d, blocks)[0];
  for (std::size_t i = 0; i < uniform.size(); ++i)
    EXPECT_FLOAT_EQ(clipped->weight[i], i == 3 ? float(0.5 * 1.5 * (1 / 6. + 2 + 1 + 1 + 0.25) / 5) : float(uniform[i]))
        << "visibility " << i;
  const auto n = weighted({"natural"}, nullptr, blocks)[0];
  for (std::size_t i = 0; i < uniform.size(); ++i) EXPECT_EQ(n->weight[i], blocks[0]->weight[i]);
}

TEST(WeightDensity, RandomBlocksMatchReference) {
  for (auto seed : test::seeds(20240917ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (auto [image_size, cell_arcsec, padding] : {std::tuple{512, 20.0, 1.2}, std::tuple{300, 45.0, 1.0},
                                                      std::tuple{96, 300.0, 2.0}}) {
      SCOPED_TRACE("image " + std::to_string(image_size) + ", cell " + std::to_string(cell_arcsec) + ", padding " +
                   std::to_string(padding));
      auto ks = geometry_only_kernels(image_size, cell_arcsec);
      // Three blocks, the middle one empty: the density accumulates over the stream.
      const Blocks blocks{uv_block(random_uv(rng, 40000, ks->geom.cell_rad), 0), uv_block({}, 1),
                          uv_block(random_uv(rng, 25000, ks->geom.cell_rad), 2)};
      Reference ref(image_size, ks->geom.cell_rad, padding);
      ref.add(blocks);
      expect_density_matches(*density_of(ks, blocks, padding), ref);
    }
  }
}

TEST(WeightDensity, EmptyStreamGivesAZeroGrid) {
  auto ks = geometry_only_kernels(64, 100);
  const auto d = density_of(ks, {});
  EXPECT_EQ(d->geom.width, 80);
  for (double c : d->cells) ASSERT_EQ(c, 0.0);
  EXPECT_EQ(d->totals[0], 0.0);
  EXPECT_EQ(d->totals[1], 0.0);
  // Nothing was gridded: uniform gives 0 (every cell is empty); briggs weighs every cell
  // 1 / (1 + f^2 W) = 1 (f^2 = 0 when nothing was gridded); natural keeps the weights.
  const Blocks blocks{uv_block({{10, 10, 2.0f}})};
  EXPECT_EQ(weighted({"uniform"}, d, blocks)[0]->weight[0], 0.0f);
  EXPECT_EQ(weighted({"briggs", 1}, d, blocks)[0]->weight[0], 2.0f);
  EXPECT_EQ(weighted({"natural"}, d, blocks)[0]->weight[0], 2.0f);
}

TEST(Weighting, RandomBlocksMatchReference) {
  for (auto seed : test::seeds(20240917ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = geometry_only_kernels(256, 30);
    const Blocks blocks{uv_block(random_uv(rng, 30000, ks->geom.cell_rad), 0),
                        uv_block(random_uv(rng, 20000, ks->geom.cell_rad), 1)};
    Reference ref(256, ks->geom.cell_rad, 1.2);
    ref.add(blocks);
    const auto d = density_of(ks, blocks);
    expect_weights_match(blocks, weighted({"natural"}, nullptr, blocks), ref, {"natural"});
    expect_weights_match(blocks, weighted({"natural"}, d, blocks), ref, {"natural"});
    // The rank filter clips cells of these data (uniform at WSClean's level 3; briggs, whose empty
    // cells weigh 1, at 1.2), so the comparisons exercise it.
    EXPECT_NE(ref.cell_weights("uniform", 0, 3, 16), ref.cell_weights("uniform", 0, 0, 16));
    EXPECT_NE(ref.cell_weights("briggs", 0, 1.2, 16), ref.cell_weights("briggs", 0, 0, 16));
    // WSClean's default rank filter, none, stronger, and windows of odd and small sizes.
    for (auto [level, size] : {std::pair{3.0, 16}, std::pair{0.0, 16}, std::pair{1.2, 16}, std::pair{2.0, 5},
                               std::pair{1.0, 2}}) {
      expect_weights_match(blocks, weighted({"uniform", 0, level, size}, d, blocks), ref, {"uniform", 0, level, size});
      for (double robust : {-2.0, -0.5, 0.0, 0.7, 2.0}) {
        const Weighting wt{"briggs", robust, level, size};
        expect_weights_match(blocks, weighted(wt, d, blocks), ref, wt);
      }
    }
  }
}

// Uniform without the rank filter: the imaging weights of every occupied cell add up to 1; beyond
// the grid they are 0.
TEST(Weighting, UniformWeightsOfEveryOccupiedCellSumToOne) {
  for (auto seed : test::seeds(20240917ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = geometry_only_kernels(200, 60);
    const Blocks blocks{uv_block(random_uv(rng, 50000, ks->geom.cell_rad), 0),
                        uv_block(random_uv(rng, 10000, ks->geom.cell_rad), 1)};
    const auto out = weighted({"uniform", 0, 0.0}, density_of(ks, blocks), blocks);
    const Reference ref(200, ks->geom.cell_rad, 1.2);
    std::map<long, double> sum, input;
    std::size_t outside = 0;
    for (std::size_t b = 0; b < blocks.size(); ++b)
      for (std::size_t i = 0; i < blocks[b]->size(); ++i) {
        const long k = ref.cell_of(blocks[b]->uu[i], blocks[b]->vv[i]);
        if (k < 0) {
          EXPECT_EQ(out[b]->weight[i], 0.0f);
          ++outside;
          continue;
        }
        sum[k] += out[b]->weight[i];
        input[k] += blocks[b]->weight[i];
      }
    EXPECT_GT(outside, 0u);
    std::size_t occupied = 0, bad = 0;
    for (auto& [k, s] : sum) {
      if (input[k] == 0) continue;  // only zero weights in this cell
      ++occupied;
      if (std::abs(s - 1) > 1e-5) ++bad;
    }
    EXPECT_GT(occupied, 1000u);
    EXPECT_EQ(bad, 0u) << "occupied cells whose uniform weights do not sum to 1";
  }
}

// Without the rank filter, Briggs at R = -5 is uniform up to the factor 1/f^2; at R = +5 it is
// natural. (Weights of at least 0.25 keep every f^2 W_k far from 1 at both ends, so the limits hold
// to float precision.)
TEST(Weighting, BriggsTendsToUniformAndToNatural) {
  for (auto seed : test::seeds(20240917ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto ks = geometry_only_kernels(256, 30);
    auto pts = random_uv(rng, 40000, ks->geom.cell_rad);
    for (auto& p : pts) p.weight = p.weight == 0 ? 0.0f : std::max(p.weight, 0.25f);
    const Blocks blocks{uv_block(pts)};
    const auto d = density_of(ks, blocks);
    const auto uniform = weighted({"uniform", 0, 0.0}, d, blocks)[0];
    const auto low = weighted({"briggs", -5, 0.0}, d, blocks)[0];
    const auto high = weighted({"briggs", 5, 0.0}, d, blocks)[0];
    const double f2 = 25e10 / (d->totals[1] / d->totals[0]);
    std::size_t bad_low = 0, bad_high = 0, inside = 0;
    const Reference ref(256, ks->geom.cell_rad, 1.2);
    for (std::size_t i = 0; i < blocks[0]->size(); ++i) {
      if (std::abs(low->weight[i] * f2 - uniform->weight[i]) > 1e-6 * uniform->weight[i]) ++bad_low;
      if (ref.cell_of(blocks[0]->uu[i], blocks[0]->vv[i]) < 0) continue;  // weight 0 under briggs
      ++inside;
      if (std::abs(high->weight[i] - blocks[0]->weight[i]) > 1e-6 * blocks[0]->weight[i]) ++bad_high;
    }
    EXPECT_GT(inside, 30000u);
    EXPECT_EQ(bad_low, 0u) << "briggs -5 not proportional to uniform";
    EXPECT_EQ(bad_high, 0u) << "briggs +5 not natural";
  }
}

TEST(WeightingErrors, InvalidInputsAndParameters) {
  auto ks = geometry_only_kernels(64, 100);
  for (auto pts : {std::vector<UvWeight>{{NAN, 1, 1.0f}}, std::vector<UvWeight>{{1, INFINITY, 1.0f}},
                   std::vector<UvWeight>{{1, 1, -1.0f}}, std::vector<UvWeight>{{1, 1, NAN}}}) {
    StageHarness h(uvw_weight_density::spec(), "cpu");
    h.set_input("kernels", ks);
    EXPECT_THROW(h.process({{"vis", uv_block(pts)}}), InputError);
  }
  // uniform and briggs cannot run without a density; natural can.
  const Blocks blocks{uv_block({{1, 1, 1.0f}})};
  for (std::string mode : {"uniform", "briggs"}) {
    StageHarness h(uvw_weighting::spec(), "cpu", {{"mode", mode}});
    try {
      h.process({{"vis", blocks[0]}});
      ADD_FAILURE() << mode << " ran without a density";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("density"), std::string::npos) << e.what();
    }
  }
  // robust belongs to briggs; a rank filter level in (0, 1) would be ignored by WSClean.
  EXPECT_THROW(StageHarness(uvw_weighting::spec(), "cpu", {{"mode", std::string("uniform")}, {"robust", 0.5}}),
               ParamError);
  EXPECT_THROW(StageHarness(uvw_weighting::spec(), "cpu", {{"rank_filter", 0.5}}), ParamError);
  // A density whose arrays do not match its geometry.
  auto d = std::make_shared<WeightDensity>(*density_of(ks, blocks));
  d->cells = Array<double>::host(10);
  StageHarness h(uvw_weighting::spec(), "cpu");
  h.set_input("density", d);
  EXPECT_THROW(h.process({{"vis", blocks[0]}}), InputError);
  // Blocks from another visibility set than the density's.
  auto obs_a = std::make_shared<Observation>(), obs_b = std::make_shared<Observation>();
  obs_a->origin = "a.ms", obs_b->origin = "b.ms";
  obs_a->total_visibilities = obs_b->total_visibilities = 1;
  auto from_a = uv_block({{1, 1, 1.0f}}), from_b = uv_block({{1, 1, 1.0f}});
  from_a->obs = obs_a, from_b->obs = obs_b;
  const auto density_a = density_of(ks, {from_a});
  EXPECT_EQ(density_a->obs, obs_a);
  EXPECT_EQ(weighted({"uniform"}, density_a, {from_a})[0]->weight[0], 1.0f);
  EXPECT_THROW(weighted({"uniform"}, density_a, {from_b}), InputError);
  EXPECT_EQ(weighted({"natural"}, density_a, {from_b})[0]->weight[0], 1.0f);  // natural reads no density
}

// The pipeline shape of pipelines/ms_dirty_image.yaml on simulated data: the visibilities read
// twice, the second read waiting for the density. A 1 Jy source at the phase centre keeps its
// flux under every weighting (the image is normalised by the weights gridded); uniform weighting
// narrows the main lobe. Run with 1 and 3 blocks in flight.
TEST(WeightingPipeline, ReadsTwiceAndKeepsAPointSourcesFlux) {
  const std::string yaml = R"(schema: uvflow/1
vars: {mode: uniform, robust: 0}
stages:
  - {id: vis, type: io.simulate, params: {preset: tiny, sky: [{l_deg: 0, m_deg: 0, flux_jy: 1}]}}
  - {id: vis2, type: io.simulate, params: {preset: tiny, sky: [{l_deg: 0, m_deg: 0, flux_jy: 1}]}}
  - {id: kernels, type: kernels.wproj, params: {image_size: 128, cell_arcsec: 200, cache_dir: ""}, in: {info: vis}}
  - {id: density, type: uvw.weight_density, in: {vis: vis, kernels: kernels}}
  - {id: weights, type: uvw.weighting, params: {mode: "${mode}", robust: "${robust}"}, in: {vis: vis2.vis, density: density}}
  - {id: grid, type: grid.serial, in: {vis: weights, kernels: kernels}}
  - {id: image, type: fft.grid_to_image, in: {grid: grid}}
  - {id: corr, type: image.grid_correct, in: {image: image, kernels: kernels}}
  - {id: fits, type: io.write_fits, params: {path: dirty.fits}, in: {image: corr}}
)";
  TempDir dir;
  Registry reg;
  register_builtin_stages(reg);
  std::map<std::string, double> lobe;  // pixels above half the peak
  for (const std::string sets : {"mode=natural", "mode=uniform", "mode=briggs,robust=0", "mode=briggs,robust=-1"})
    for (int in_flight : {1, 3}) {
      SCOPED_TRACE(sets + ", max_in_flight " + std::to_string(in_flight));
      std::vector<std::string> over{"run.max_in_flight=" + std::to_string(in_flight)};
      for (std::size_t a = 0, b; a < sets.size(); a = b + 1) {
        b = sets.find(',', a);
        if (b == std::string::npos) b = sets.size();
        over.push_back("vars." + sets.substr(a, b - a));
      }
      const auto cwd = std::filesystem::current_path();
      std::filesystem::current_path(dir.path());
      try {
        run_plan(load_plan(dir.write("p.yaml", yaml), over, reg));
      } catch (...) {
        std::filesystem::current_path(cwd);
        throw;
      }
      std::filesystem::current_path(cwd);
      const FitsImage img = read_fits_image(dir / "dirty.fits");
      const float centre = img.pixels[std::size_t(64) * 128 + 64];
      EXPECT_NEAR(centre, 1.0, 0.01);
      float peak = 0;
      double half = 0;
      for (float p : img.pixels) peak = std::max(peak, p), half += p > 0.5f;
      EXPECT_EQ(peak, centre);
      lobe[sets] = half;
    }
  for (auto& [sets, n] : lobe) std::printf("[%s] pixels above half the peak: %.0f\n", sets.c_str(), n);
  EXPECT_LT(lobe["mode=uniform"], lobe["mode=natural"]);
  EXPECT_LT(lobe["mode=briggs,robust=-1"], lobe["mode=briggs,robust=0"]);
  EXPECT_LT(lobe["mode=briggs,robust=0"], lobe["mode=natural"]);
}
