// `choose: auto`: the option picked by the stages' estimates (graph/estimate.hpp) on the data at hand,
// the accuracy bound, settings of every option accepted, and an option that cannot run passed over.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "graph/estimate.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "stages/builtin.hpp"
#include "stages/shared/abs_w_histogram.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/source_dir.hpp"

using namespace uvflow;

namespace {

// The dirty-image choice of pipelines/dirty_image.yaml, on the simulator's data, with `accuracy`.
std::string pipeline(const std::string& accuracy_line = "") {
  return R"(schema: uvflow/1
name: auto_test
vars: {npix: 512, cell_arcsec: 100, preset: tiny, epsilon: 1e-4, method: auto}
stages:
  - {id: vis, type: io.simulate, params: {preset: "${preset}", sky_spacing_deg: 0.5}}
  - id: imaging
    choose: "${method}"
)" + accuracy_line +
         R"(    options:
      wproj:
        stages:
          - id: kernels
            type: kernels.wproj
            params: {image_size: "${npix}", cell_arcsec: "${cell_arcsec}", oversample: 4}
            in: {info: vis}
          - {id: sort, type: uvw.w_sort, in: {vis: vis, kernels: kernels}}
          - {id: box, type: uvw.bounding_box, in: {vis: sort}}
          - {id: count, type: tiles.count, params: {tile_u: 64, tile_v: 64}, in: {vis: sort, box: box}}
          - {id: buckets, type: tiles.bucket_sort, in: {vis: sort, counts: count}}
          - {id: grid, type: grid.tiled, in: {buckets: buckets, kernels: kernels}}
          - {id: image, type: fft.grid_to_image, in: {grid: grid}}
          - {id: corr, type: image.grid_correct, in: {image: image, kernels: kernels}}
        outputs: {image: corr}
      wstack:
        stages:
          - id: wstack
            type: grid.wstack
            params: {image_size: "${npix}", cell_arcsec: "${cell_arcsec}", epsilon: "${epsilon}"}
            in: {vis: vis}
        outputs: {image: wstack}
  - {id: fits, type: io.write_fits, params: {path: out/auto.fits}, in: {image: imaging.image}}
)";
}

Plan plan(const std::vector<std::string>& sets, const std::string& accuracy_line = "") {
  static Registry reg = [] {  // a plan points into its registry's specs: it must outlive them
    Registry r;
    register_builtin_stages(r);
    return r;
  }();
  return load_plan_text(pipeline(accuracy_line), test::source_dir() / "tests/configs/auto_test.yaml", sets, reg);
}

const ChoicePlan& imaging(const Plan& p) {
  EXPECT_EQ(p.choices.size(), 1u);
  return p.choices.at(0);
}

// The sum of the estimates of an option's stages, planned explicitly.
double option_seconds(const std::string& option, std::vector<std::string> sets) {
  sets.push_back("imaging.choose=" + option);
  const Plan p = plan(sets);
  double s = 0;
  for (auto& c : estimate_stages(p))
    for (auto& id : imaging(p).option_stages.at(option))
      if (c.id == id) {
        EXPECT_TRUE(c.estimated) << c.id;
        s += c.est.seconds;
      }
  return s;
}

}  // namespace

// Which method is faster depends on the data: the pick is the option with the smaller estimate, in
// both directions, and says why.
TEST(ChooseAuto, PicksTheOptionWithTheSmallerEstimate) {
  // A narrow field of few pixels (w-projection's kernels stay small) against a wide field at
  // w-stacking's accuracy 1e-2 with many pixels (w-projection needs many wide kernels).
  const std::vector<std::vector<std::string>> cases = {
      {"vars.npix=256", "vars.cell_arcsec=20", "vars.preset=small", "vars.epsilon=1e-4"},
      {"vars.npix=2048", "vars.cell_arcsec=60", "vars.preset=tiny", "vars.epsilon=1e-2"}};
  std::set<std::string> picked;
  for (auto& sets : cases) {
    const double wproj = option_seconds("wproj", sets), wstack = option_seconds("wstack", sets);
    const Plan p = plan(sets);
    const ChoicePlan& c = imaging(p);
    EXPECT_TRUE(c.automatic);
    EXPECT_EQ(c.chosen, wproj < wstack ? "wproj" : "wstack") << wproj << " s vs " << wstack << " s";
    EXPECT_NE(c.why.find("auto picked " + c.chosen), std::string::npos) << c.why;
    EXPECT_NE(c.why.find("wproj: estimated"), std::string::npos) << c.why;
    EXPECT_NE(c.why.find("wstack: estimated"), std::string::npos) << c.why;
    // Only the chosen option's stages are planned.
    EXPECT_EQ(p.index_of("wstack") >= 0, c.chosen == "wstack");
    EXPECT_EQ(p.index_of("kernels") >= 0, c.chosen == "wproj");
    picked.insert(c.chosen);
  }
  EXPECT_EQ(picked.size(), 2u) << "the two cases should pick different methods";
}

// Loaded without estimates (what preflight does to the pipelines beside one, to name the maker of a
// missing input), `choose: auto` takes the first option that plans: here w-projection, where the
// estimates pick w-stacking; nothing is simulated for it.
TEST(ChooseAuto, WithoutEstimatesTheFirstOptionThatPlans) {
  const std::vector<std::string> sets = {"vars.npix=2048", "vars.cell_arcsec=60", "vars.preset=tiny", "vars.epsilon=1e-2"};
  ASSERT_EQ(imaging(plan(sets)).chosen, "wstack");
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("uvflow_auto_" + std::to_string(std::random_device{}()) + ".yaml");
  std::ofstream(file) << pipeline();
  Registry reg;
  register_builtin_stages(reg);
  const Plan p = load_plan(file, sets, reg, {}, true, /*estimate=*/false);
  std::filesystem::remove(file);
  EXPECT_EQ(imaging(p).chosen, "wproj");
  EXPECT_FALSE(imaging(p).automatic);
  EXPECT_EQ(imaging(p).why.find("estimated"), std::string::npos) << imaging(p).why;
}

// An accuracy the w-projection option's settings cannot promise (oversample 4: a predicted lookup
// error of several 1e-3) leaves the w-stacking option, whatever the estimates.
TEST(ChooseAuto, PassesOverOptionsPredictedLessAccurateThanAsked) {
  const std::vector<std::string> sets = {"vars.npix=256", "vars.cell_arcsec=20", "vars.preset=small"};
  ASSERT_EQ(imaging(plan(sets)).chosen, "wproj");
  const Plan p = plan(sets, "    accuracy: 1e-4\n");
  EXPECT_EQ(imaging(p).chosen, "wstack");
  EXPECT_NE(imaging(p).why.find("wproj: passed over: its predicted error"), std::string::npos) << imaging(p).why;
}

// Settings of either option's stages are accepted with auto (they apply if it is picked); an
// option that cannot meet its settings is passed over, and none left is a configuration error.
TEST(ChooseAuto, SettingsOfEitherOptionAndOptionsThatCannotRun) {
  const std::vector<std::string> base = {"vars.npix=256", "vars.cell_arcsec=20", "vars.preset=small"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return more;
  };
  const Plan p = plan(with({"wstack.padding=1.5", "kernels.oversample=8"}));
  ASSERT_EQ(imaging(p).chosen, "wproj");
  EXPECT_EQ(p.stages[size_t(p.index_of("kernels"))].params.integer("oversample"), 8);
  // kernels.wproj cannot reach epsilon 1e-7 at padding 1.2: wproj is passed over.
  const Plan q = plan(with({"kernels.epsilon=1e-7"}));
  EXPECT_EQ(imaging(q).chosen, "wstack");
  EXPECT_NE(imaging(q).why.find("wproj: passed over: "), std::string::npos) << imaging(q).why;
  EXPECT_NE(imaging(q).why.find("needs a kernel oversampling above 8"), std::string::npos) << imaging(q).why;
  try {
    plan(with({"kernels.epsilon=1e-7", "vars.epsilon=1e-2"}), "    accuracy: 1e-3\n");
    ADD_FAILURE() << "no option can run: expected a ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_NE(e.diagnostics()[0].message.find("choose auto found no option that can run"), std::string::npos)
        << e.diagnostics()[0].message;
    EXPECT_NE(e.diagnostics()[0].message.find("wstack: passed over: its predicted error 0.01 is above the accuracy 0.001"),
              std::string::npos)
        << e.diagnostics()[0].message;
  }
}

// The |w| quantiles the sources give the estimates: within half a bin (3 %, and a little) of the sorted data's, on a
// wide spread of fresh random values, and the same from partial histograms merged in any order.
TEST(ChooseAuto, AbsWQuantilesMatchTheSortedData) {
  for (auto seed : test::seeds(5)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    std::lognormal_distribution<double> dist(std::log(300.0), 2.0);
    std::vector<double> w(20000);
    AbsWHistogram whole, a, b;
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] = dist(rng);
      whole.add(w[i]);
      (i % 3 ? a : b).add(w[i]);
    }
    b.merge(a);
    const auto q = whole.quantiles(64);
    ASSERT_EQ(q.size(), 64u);
    EXPECT_EQ(b.quantiles(64), q);
    std::sort(w.begin(), w.end());
    for (int i = 0; i < 64; ++i) {
      const double exact = w[std::size_t((i + 0.5) / 64 * double(w.size()))];
      EXPECT_NEAR(q[std::size_t(i)] / exact, 1.0, 0.04) << "quantile " << i;
    }
  }
  EXPECT_TRUE(AbsWHistogram().quantiles(64).empty());
}
