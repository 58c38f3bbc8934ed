// Loops (a `loop:` entry of a pipeline): the semantics with small test stages (cycles counted, state
// carried, every stop condition, the control each cycle sees, the per-cycle report), the settings
// refused before anything runs with file:line:col, an error and Ctrl-C inside a loop leaving no
// output, and pipelines/clean_image.yaml's Cotton-Schwab major cycles on its simulated sky.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "graph/executor.hpp"
#include "graph/interrupt.hpp"
#include "graph/pipeline.hpp"
#include "graph/preflight.hpp"
#include "graph/report.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/cycle.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/builtin.hpp"
#include "stages/io/write_fits.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/gauss_fit.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_stages.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

// ---------------------------------------------------------------- test stages

std::shared_ptr<Numbers> number(double v) {
  auto p = std::make_shared<Numbers>();
  p->values = Array<double>::host(1);
  p->values[0] = v;
  return p;
}

namespace value {
inline constexpr Out<Numbers> out{.name = "out", .arity = Arity::once, .residency = Residency::host};
struct Params {
  double v = 1;
};
const StageDecl<Params> decl{.type = "lt.value",
                             .summary = "one number",
                             .outputs = {out},
                             .params = {{&Params::v, {.name = "v", .doc = "the number"}}}};
}  // namespace value

class Value : public DeclaredStage<value::decl> {
 public:
  void start(Context& ctx) override { ctx.emit(value::out, number(params().v)); }
  void process(Context&) override {}
};

// What lt.step saw of each cycle's control.
std::vector<CycleControl>& seen() {
  static std::vector<CycleControl> v;
  return v;
}

// x -> x * factor, reporting |x| as the peak, `noise` and `iterations` as its figures; fails or
// interrupts the run at a cycle on request.
namespace step {
inline constexpr In<Numbers> x{.name = "x", .arity = Arity::once, .residency = Residency::host};
inline constexpr In<CycleControl> control{.name = "control", .arity = Arity::once, .residency = Residency::host, .optional = true};
inline constexpr Out<Numbers> out{.name = "x", .arity = Arity::once, .residency = Residency::host};
inline constexpr Out<CycleFigures> figures{.name = "figures", .arity = Arity::once, .residency = Residency::host};
struct Params {
  double factor = 0.5;
  double noise = 0;
  std::int64_t iterations = 1;
  std::int64_t fail_at = -1;
  std::int64_t interrupt_at = -1;
};
const StageDecl<Params> decl{.type = "lt.step",
                             .summary = "x * factor, with figures",
                             .inputs = {x, control},
                             .outputs = {out, figures},
                             .params = {{&Params::factor, {.name = "factor", .doc = ""}},
                                        {&Params::noise, {.name = "noise", .doc = ""}},
                                        {&Params::iterations, {.name = "iterations", .doc = ""}},
                                        {&Params::fail_at, {.name = "fail_at", .doc = ""}},
                                        {&Params::interrupt_at, {.name = "interrupt_at", .doc = ""}}}};
}  // namespace step

class Step : public DeclaredStage<step::decl> {
 public:
  void process(Context& ctx) override {
    const std::int64_t cycle = ctx.connected(step::control) ? ctx.in(step::control)->cycle : -1;
    if (ctx.connected(step::control)) seen().push_back(*ctx.in(step::control));
    if (cycle == params().fail_at) throw std::runtime_error("deliberate failure in cycle " + std::to_string(cycle));
    if (cycle == params().interrupt_at) {
      request_interrupt();
      while (!ctx.cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    const double x = ctx.in(step::x)->values[0] * params().factor;
    ctx.emit(step::out, number(x));
    auto f = std::make_shared<CycleFigures>();
    f->peak_start = std::abs(x / params().factor);
    f->peak = std::abs(x);
    f->noise = params().noise;
    f->iterations = params().iterations;
    f->flux = x;
    f->model_flux = x;
    f->stop = "test";
    ctx.emit(step::figures, f);
  }
};

Registry registry() {
  Registry r;
  register_builtin_stages(r);
  register_test_stages(r);
  r.add(value::decl.spec({cpu_backend<Value>()}));
  r.add(step::decl.spec({cpu_backend<Step>()}));
  return r;
}

// A pipeline with one lt.step loop: x starts at 1 and halves every cycle; `loop` is the settings'
// YAML (flow style), the final x is written to `out`.
std::string step_pipeline(const std::string& loop, const std::string& step_params, const std::string& out) {
  return "schema: uvflow/1\n"
         "stages:\n"
         "  - {id: start, type: lt.value, params: {v: 1}}\n"
         "  - id: halve\n"
         "    loop: " + loop + "\n"
         "    state:\n"
         "      x: {init: start, next: step.x}\n"
         "    stages:\n"
         "      - {id: step, type: lt.step, params: " + step_params + ", in: {x: x, control: halve.control}}\n"
         "  - {id: write, type: test.write_total, params: {path: " + out + "}, in: {in: halve.x}}\n";
}

double read_number(const std::filesystem::path& p) {
  std::ifstream f(p);
  double v = NAN;
  f >> v;
  return v;
}

struct Ran {
  RunReport report;
  double x;
};
Ran run_steps(const std::string& loop, const std::string& step_params = "{}") {
  TempDir dir;
  Registry reg = registry();
  const auto out = dir / "x.txt";
  const auto file = dir.write("loop.yaml", step_pipeline(loop, step_params, out.string()));
  seen().clear();
  RunReport r = run_plan(load_plan(file, {}, reg));
  return {r, read_number(out)};
}

// ---------------------------------------------------------------- semantics

TEST(Loop, RunsMaxCyclesCarryingState) {
  auto r = run_steps("{max_cycles: 4}");
  EXPECT_DOUBLE_EQ(r.x, 1.0 / 16);  // four halvings, each cycle fed the last one's x
  ASSERT_EQ(r.report.loops.size(), 1u);
  EXPECT_EQ(r.report.loops[0].cycles.size(), 4u);
  EXPECT_EQ(r.report.loops[0].stopped_by, "max_cycles");
  ASSERT_EQ(seen().size(), 4u);
  for (std::int64_t c = 0; c < 4; ++c) {
    EXPECT_EQ(seen()[std::size_t(c)].cycle, c);
    EXPECT_EQ(seen()[std::size_t(c)].max_cycles, 4);
    EXPECT_EQ(seen()[std::size_t(c)].minor_iterations_left, -1);
  }
  // The body's stage ran once per cycle; the run table sums its cycles, and each cycle lists its
  // own time for it (the per-cycle table of the JSON report), which add up to the sum.
  EXPECT_EQ(r.report.stage("step").items_in, 4);
  double sum = 0;
  for (auto& c : r.report.loops[0].cycles) {
    ASSERT_EQ(c.stages.size(), 1u);
    EXPECT_EQ(c.stages[0].id, "step");
    EXPECT_GT(c.stages[0].wall_s, 0);
    EXPECT_LE(c.stages[0].wall_s, c.wall_s);
    sum += c.stages[0].wall_s;
  }
  EXPECT_DOUBLE_EQ(sum, r.report.stage("step").wall_s);
  const auto json = nlohmann::json::parse(report_json(r.report));
  EXPECT_EQ(json["loops"][0]["cycles"][3]["stages"][0]["id"], "step");
  EXPECT_DOUBLE_EQ(json["loops"][0]["cycles"][3]["stages"][0]["wall_s"].get<double>(), r.report.loops[0].cycles[3].stages[0].wall_s);
}

TEST(Loop, OutputsOfTheLastCycleAndThePlan) {
  // `outputs:` hands on a body value of the last cycle besides the state; `uvflow plan` shows the loop.
  TempDir dir;
  Registry reg = registry();
  std::string text = step_pipeline("{max_cycles: 3}", "{factor: 3}", (dir / "x.txt").string());
  text.insert(text.find("  - {id: write"), "    outputs: {tripled: step.x}\n");
  text += "  - {id: write2, type: test.write_total, params: {path: " + (dir / "out.txt").string() + "}, in: {in: halve.tripled}}\n";
  const auto file = dir.write("loop.yaml", text);
  const Plan p = load_plan(file, {}, reg);
  const std::string shown = plan_to_text(p);
  EXPECT_NE(shown.find("loop halve: at most 3 cycles; each cycle runs step"), std::string::npos) << shown;
  EXPECT_NE(shown.find("state x <- start.out first, then step.x  Numbers, once, host"), std::string::npos) << shown;
  EXPECT_NE(plan_to_dot(p).find("\"step\" -> \"x\" [label=\"next cycle\""), std::string::npos);
  run_plan(p);
  EXPECT_DOUBLE_EQ(read_number(dir / "x.txt"), 27);
  EXPECT_DOUBLE_EQ(read_number(dir / "out.txt"), 27);
}

TEST(Loop, StopsAtThreshold) {
  // |x| = 0.5, 0.25, 0.125, 0.0625: at most 0.1 after the fourth cycle.
  auto r = run_steps("{max_cycles: 100, threshold: 0.1, figures: step.figures}");
  EXPECT_DOUBLE_EQ(r.x, 0.0625);
  EXPECT_EQ(r.report.loops[0].stopped_by, "threshold");
  ASSERT_EQ(r.report.loops[0].cycles.size(), 4u);
  const CycleReport& c = r.report.loops[0].cycles[3];
  EXPECT_EQ(c.cycle, 3);
  EXPECT_DOUBLE_EQ(c.peak_start, 0.125);
  EXPECT_DOUBLE_EQ(c.peak, 0.0625);
  EXPECT_EQ(c.minor_stop, "test");
  EXPECT_DOUBLE_EQ(seen()[0].threshold_jy, 0.1);
  // Exactly at the threshold stops too: 0.125 after three cycles.
  EXPECT_EQ(run_steps("{max_cycles: 100, threshold: 0.125, figures: step.figures}").report.loops[0].cycles.size(), 3u);
}

TEST(Loop, StopsAtThresholdInNoiseUnits) {
  // 3 x noise 0.05 = 0.15: 0.125 after three cycles is below it.
  auto r = run_steps("{max_cycles: 100, threshold_sigma: 3, figures: step.figures}", "{noise: 0.05}");
  EXPECT_EQ(r.report.loops[0].stopped_by, "threshold_sigma");
  EXPECT_EQ(r.report.loops[0].cycles.size(), 3u);
  EXPECT_DOUBLE_EQ(r.report.loops[0].cycles[2].noise, 0.05);
  EXPECT_DOUBLE_EQ(seen()[0].threshold_sigma, 3);
}

TEST(Loop, StopsAfterMinorIterationsInAll) {
  // 7 per cycle, at most 20: 7, 14, 21; each cycle is told how many are left.
  auto r = run_steps("{max_cycles: 100, max_minor_iterations: 20, major_gain: 0.7, figures: step.figures}", "{iterations: 7}");
  EXPECT_EQ(r.report.loops[0].stopped_by, "max_minor_iterations");
  ASSERT_EQ(r.report.loops[0].cycles.size(), 3u);
  EXPECT_EQ(r.report.loops[0].cycles[2].total_iterations, 21);
  ASSERT_EQ(seen().size(), 3u);
  EXPECT_EQ(seen()[0].minor_iterations_left, 20);
  EXPECT_EQ(seen()[1].minor_iterations_left, 13);
  EXPECT_EQ(seen()[2].minor_iterations_left, 6);
  EXPECT_DOUBLE_EQ(seen()[2].major_gain, 0.7);
}

TEST(Loop, StopsWhenACycleFindsNothing) {
  auto r = run_steps("{max_cycles: 100, threshold: 1e-9, figures: step.figures}", "{iterations: 0}");
  EXPECT_EQ(r.report.loops[0].stopped_by, "no_components");
  EXPECT_EQ(r.report.loops[0].cycles.size(), 1u);
}

TEST(Loop, StreamStateAndLoopInvariantStream) {
  TempDir dir;
  Registry reg = registry();
  const auto out = dir / "total.txt";
  const auto file = dir.write("loop.yaml", stream_state_loop(out, 4));
  RunReport r = run_plan(load_plan(file, {}, reg));
  EXPECT_DOUBLE_EQ(read_number(out), 4.0 * 4 * (0 + 1 + 2 + 3 + 4 + 5));
  ASSERT_EQ(r.loops.size(), 1u);
  EXPECT_EQ(r.loops[0].cycles.size(), 3u);
  EXPECT_EQ(r.stage("add").items_in, 18);  // 6 items in each of 3 cycles
}

// ---------------------------------------------------------------- refused before anything runs

// The diagnostics of loading `text` (and, when it loads, of the checks before a run), each as
// "loop.yaml:LINE:COL: error: ...".
std::vector<std::string> refusals(const std::string& text, std::vector<std::string> sets = {}) {
  TempDir dir;
  Registry reg = registry();
  const auto file = dir.write("loop.yaml", text);
  std::vector<Diagnostic> diags;
  try {
    Plan p = load_plan(file, sets, reg);
    diags = preflight(p, PreflightFor::run, reg).errors;
  } catch (const ConfigError& e) {
    diags = e.diagnostics();
  }
  std::vector<std::string> out;
  for (auto& d : diags) {
    std::string s = d.str();
    if (auto at = s.find(dir.path().string() + "/"); at != std::string::npos) s.erase(at, dir.path().string().size() + 1);
    out.push_back(s);
  }
  return out;
}

// True when one of `diags` starts with `where` and contains `what`.
::testing::AssertionResult has(const std::vector<std::string>& diags, const std::string& where, const std::string& what) {
  for (auto& d : diags)
    if (d.rfind(where, 0) == 0 && d.find(what) != std::string::npos) return ::testing::AssertionSuccess();
  std::string all;
  for (auto& d : diags) all += "\n  " + d;
  return ::testing::AssertionFailure() << "no '" << where << "...'" << what << "' among:" << all;
}

TEST(LoopRefused, NoBound) {
  const auto d = refusals(step_pipeline("{threshold: 0.1, figures: step.figures}", "{}", "x.txt"));
  EXPECT_TRUE(has(d, "loop.yaml:5:11:", "loop 'halve' has no 'max_cycles'")) << d.size();
}

TEST(LoopRefused, NegativeThresholdsAndBadGain) {
  auto d = refusals(step_pipeline("{max_cycles: 3, threshold: -0.5, figures: step.figures}", "{}", "x.txt"));
  EXPECT_TRUE(has(d, "loop.yaml:5:38:", "threshold"));
  d = refusals(step_pipeline("{max_cycles: 3, threshold_sigma: -1, figures: step.figures}", "{}", "x.txt"));
  EXPECT_TRUE(has(d, "loop.yaml:5:44:", "threshold_sigma"));
  d = refusals(step_pipeline("{max_cycles: 0}", "{}", "x.txt"));
  EXPECT_TRUE(has(d, "loop.yaml:5:24:", "max_cycles"));
  d = refusals(step_pipeline("{max_cycles: 3, major_gain: 1.5}", "{}", "x.txt"));
  EXPECT_TRUE(has(d, "loop.yaml:5:39:", "major_gain"));
  // From the command line too, named by the --set.
  d = refusals(step_pipeline("{max_cycles: 3, figures: step.figures}", "{}", "x.txt"), {"halve.threshold=-2"});
  EXPECT_TRUE(has(d, "--set halve.threshold=-2", "threshold"));
}

TEST(LoopRefused, StopConditionWithoutFigures) {
  const auto d = refusals(step_pipeline("{max_cycles: 3, threshold: 0.1}", "{}", "x.txt"));
  EXPECT_TRUE(has(d, "loop.yaml:5:38:", "'threshold' needs 'figures: STAGE.PORT'"));
  const auto e = refusals(step_pipeline("{max_cycles: 3, figures: step.x}", "{}", "x.txt"));
  EXPECT_TRUE(has(e, "loop.yaml:5:36:", "has no CycleFigures output 'x'"));
}

TEST(LoopRefused, StateWithoutInitOrOfAnotherType) {
  std::string text = step_pipeline("{max_cycles: 3}", "{}", "x.txt");
  const std::string with_init = "x: {init: start, next: step.x}";
  auto d = refusals(std::string(text).replace(text.find(with_init), with_init.size(), "x: {next: step.x}"));
  EXPECT_TRUE(has(d, "loop.yaml:7:10:", "state 'x' needs 'init'"));
  d = refusals(std::string(text).replace(text.find(with_init), with_init.size(), "x: {init: start, next: step.figures}"));
  EXPECT_TRUE(has(d, "loop.yaml:7:7:", "init is Numbers (once) but next 'step.figures' is CycleFigures"));
}

TEST(LoopRefused, NoStateUnknownSettingNoBody) {
  std::string text = step_pipeline("{max_cycles: 3, max_cycle: 2}", "{}", "x.txt");
  auto d = refusals(text);
  EXPECT_TRUE(has(d, "loop.yaml:5:27:", "unknown loop setting 'max_cycle' (did you mean 'max_cycles'?)"));
  d = refusals(step_pipeline("{max_cycles: 3}", "{}", "x.txt"), {"halve.max_cycle=2"});
  EXPECT_TRUE(has(d, "--set halve.max_cycle=2", "loop 'halve' has no setting 'max_cycle' (did you mean 'max_cycles'?)"));
  text = step_pipeline("{max_cycles: 3}", "{}", "x.txt");
  const std::string state = "      x: {init: start, next: step.x}\n";
  d = refusals(std::string(text).replace(text.find(state), state.size(), "      {}\n"));
  EXPECT_FALSE(d.empty());
  d = refusals("schema: uvflow/1\nstages:\n  - {id: start, type: lt.value}\n  - {id: l, loop: {max_cycles: 2}, state: {}, stages: []}\n");
  EXPECT_TRUE(has(d, "loop.yaml:4:43:", "loop 'l' has no 'state'"));
  EXPECT_TRUE(has(d, "loop.yaml:4:55:", "'stages' (its body) must be a non-empty list"));
}

TEST(LoopRefused, ReadsAcrossTheLoopsBoundary) {
  std::string text = step_pipeline("{max_cycles: 3}", "{}", "x.txt");
  // Outside reading the body; the body reading the loop's own exit; a state's init from the body.
  auto d = refusals(std::string(text).replace(text.find("in: {in: halve.x}"), 17, "in: {in: step.x}"));
  EXPECT_TRUE(has(d, "loop.yaml:10:73:", "reads 'step.x', inside loop 'halve': what leaves a loop is its state and outputs"));
  d = refusals(std::string(text).replace(text.find("in: {x: x,"), 10, "in: {x: halve.x,"));
  EXPECT_TRUE(has(d, "loop.yaml:9:", "reads its own loop's final values 'halve'"));
  d = refusals(std::string(text).replace(text.find("init: start"), 11, "init: step.x"));
  EXPECT_TRUE(has(d, "loop.yaml:7:17:", "'init' reads 'step.x', inside the loop"));
  // A writer in the body would write its file every cycle; loops do not nest.
  const auto in_body = [&](const std::string& stage) {
    return std::string(text).insert(text.find("  - {id: write"), "      " + stage + "\n");
  };
  d = refusals(in_body("- {id: w, type: test.write_total, params: {path: w.txt}, in: {in: step.x}}"));
  EXPECT_TRUE(has(d, "loop.yaml:10:56:", "would write 'path' again every cycle"));
  d = refusals(in_body("- {id: inner, loop: {max_cycles: 2}, state: {y: {init: start, next: step.x}}, stages: []}"));
  EXPECT_TRUE(has(d, "loop.yaml:10:27:", "loops do not nest"));
}

TEST(LoopRefused, MaskOfAnotherSizeBeforeAnythingRuns) {
  // pipelines/clean_image.yaml with a 32 x 32 mask for its 512 x 512 image: the body's minor cycle
  // is prepared (dry run) before the run starts, so the run is refused before the dirty image is made.
  TempDir dir;
  const auto mask = dir / "mask.fits";
  {
    auto img = std::make_shared<Image>();
    img->nx = img->ny = 32;
    img->pixels = Array<float>::host(32 * 32);
    std::fill(img->pixels.begin(), img->pixels.end(), 1.0f);
    img->wcs = SkyWcs{.cell_rad = 1e-4, .freq_hz = 1e8};
    StageHarness w(io_write_fits::spec(), "cpu", {{"path", mask.string()}});
    w.process({{"image", img}});
    w.commit_outputs();
  }
  Registry reg = registry();
  const auto file = std::filesystem::path(UVFLOW_TEST_SOURCE_DIR) / "pipelines/clean_image.yaml";
  Plan p = load_plan(file, {"clean.mask=" + mask.string()}, reg);
  const auto errors = preflight(p, PreflightFor::run, reg).errors;
  std::ifstream f(file);
  std::string line;
  int at = 0;
  for (int n = 1; std::getline(f, line); ++n)
    if (line.find("- id: clean") != std::string::npos) at = n;
  ASSERT_GT(at, 0);
  std::vector<std::string> d;
  for (auto& e : errors) d.push_back(e.str());
  EXPECT_TRUE(has(d, file.string() + ":" + std::to_string(at) + ":9:", "32 x 32"));
}

// ---------------------------------------------------------------- errors and Ctrl-C inside a loop

// A value written before the loop and the loop's result after it: neither file is left when the
// loop fails in its third cycle, nor any temporary.
TEST(LoopFailure, ErrorOrInterruptInsideLeavesNoOutput) {
  for (const std::string how : {"fail_at", "interrupt_at"}) {
    SCOPED_TRACE(how);
    TempDir dir;
    Registry reg = registry();
    std::string text = step_pipeline("{max_cycles: 5}", "{" + how + ": 2}", (dir / "after.txt").string());
    text += "  - {id: before, type: test.write_total, params: {path: " + (dir / "before.txt").string() + "}, in: {in: start}}\n";
    const auto file = dir.write("loop.yaml", text);
    Plan p = load_plan(file, {}, reg);
    seen().clear();
    if (how == "fail_at") {
      try {
        run_plan(p, ExecOptions{.report = (dir / "report.json").string()});
        ADD_FAILURE() << "the run succeeded";
      } catch (const StageError& e) {
        EXPECT_NE(std::string(e.what()).find("deliberate failure in cycle 2"), std::string::npos) << e.what();
      }
    } else {
      EXPECT_THROW(run_plan(p, ExecOptions{.report = (dir / "report.json").string()}), Interrupted);
    }
    EXPECT_EQ(seen().size(), 3u);  // cycles 0, 1 and the one that failed
    std::vector<std::string> left;
    for (auto& e : std::filesystem::directory_iterator(dir.path()))
      if (e.path().filename() != "loop.yaml") left.push_back(e.path().filename().string());
    EXPECT_TRUE(left.empty()) << left.front();
  }
}

// ---------------------------------------------------------------- pipelines/clean_image.yaml

struct Src {
  int x, y;
  double flux;
};

// The pipeline's sky with its noise (the simulator's noise seed: a fixed one and a fresh one).
class CleanImagePipeline : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(CleanImagePipeline, MajorCyclesRecoverEverySourceResidualIsNoise) {
  SCOPED_TRACE("noise seed " + std::to_string(GetParam()));
  Registry reg = registry();
  TempDir dir;
  auto out = [&](const char* name) { return (dir / name).string(); };
  RunReport r = run_plan(load_plan(std::filesystem::path(UVFLOW_TEST_SOURCE_DIR) / "pipelines/clean_image.yaml",
                                   {"fits.path=" + out("restored.fits"), "model_fits.path=" + out("model.fits"),
                                    "residual_fits.path=" + out("residual.fits"), "psf_fits.path=" + out("psf.fits"),
                                    "png.path=" + out("restored.png"), "run.report=" + out("report.json"),
                                    "vis.seed=" + std::to_string(GetParam())},
                                   reg),
                         ExecOptions{.report = out("report.json")});
  const std::vector<Src> sky{{216, 281, 3.0}, {316, 226, 2.0}, {266, 346, 1.0}, {136, 156, 0.5}, {406, 396, 1.5}};
  const FitsImage restored = read_fits_image(out("restored.fits"));
  const FitsImage model = read_fits_image(out("model.fits"));
  const FitsImage residual = read_fits_image(out("residual.fits"));
  const int n = 512;
  ASSERT_EQ(model.nx, n);
  ASSERT_EQ(residual.nx, n);
  auto at = [&](const FitsImage& im, int x, int y) { return double(im.pixels[std::size_t(y * n + x)]); };

  // The residual's noise, measured here away from the sources (more than 20 pixels from each).
  double s2 = 0, peak = 0;
  std::size_t count = 0;
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      peak = std::max(peak, std::abs(at(residual, x, y)));
      bool far = true;
      for (auto& s : sky) far = far && std::hypot(x - s.x, y - s.y) > 20;
      if (far) s2 += at(residual, x, y) * at(residual, x, y), ++count;
    }
  const double sigma = std::sqrt(s2 / double(count));
  ASSERT_EQ(r.loops.size(), 1u);
  const LoopReport& loop = r.loops[0];
  const CycleReport& last = loop.cycles.back();
  std::printf("%zu major cycles, stopped by %s; residual: rms %.3g mJy/beam, peak %.3g mJy/beam (%.2f sigma); the last "
              "minor cycle's noise %.3g mJy/beam, peak %.3g mJy/beam\n",
              loop.cycles.size(), loop.stopped_by.c_str(), 1e3 * sigma, 1e3 * peak, peak / sigma, 1e3 * last.noise,
              1e3 * last.peak);
  EXPECT_GT(loop.cycles.size(), 1u);  // more than one major cycle
  EXPECT_EQ(loop.stopped_by, "threshold_sigma");
  // The residual is noise: its peak, after the last re-imaging, within the stop threshold (3 sigma,
  // 5 % allowed for the minor cycle's image-plane estimate), its RMS the minor cycle's noise.
  EXPECT_LE(peak, 1.05 * 3.0 * last.noise);
  EXPECT_NEAR(sigma, last.noise, 0.15 * last.noise);
  for (const Src& s : sky) {
    ASSERT_GT(s.flux, 20 * sigma);
    // The model's flux within 2 pixels of the source, its brightest component on the source's pixel.
    // CLEAN stops at 3 sigma, so up to that much of a source may stay in the residual rather than
    // the model: the model is held to 1 % plus that; the restored image, which adds the residual
    // back, to 1 % (the measure). At 1 % alone the 0.5 Jy source's model failed about one
    // noise seed in ten (-1.08 %) while its restored peak was within 0.1 %.
    double near = 0, best = 0;
    int bx = -1, by = -1;
    for (int y = s.y - 2; y <= s.y + 2; ++y)
      for (int x = s.x - 2; x <= s.x + 2; ++x) {
        near += at(model, x, y);
        if (at(model, x, y) > best) best = at(model, x, y), bx = x, by = y;
      }
    const double rpeak = at(restored, s.x, s.y);
    // The other measure: a Gaussian fitted to the restored source (the restoring beam's
    // main lobe, 7 x 7 pixels), its amplitude the source's flux and its centre the source's pixel.
    const test::Gaussian2D fit = test::fit_gaussian(restored.pixels, n, n, s.x, s.y, 3, 1.5);
    std::printf("source (%d, %d) %.2f Jy: model %.5f Jy (%+.3f %%), restored peak %.5f Jy/beam (%+.3f %%), Gaussian "
                "fit %.5f Jy (%+.3f %%) at (%.3f, %.3f)\n", s.x, s.y, s.flux, near, 100 * (near / s.flux - 1), rpeak,
                100 * (rpeak / s.flux - 1), fit.amplitude, 100 * (fit.amplitude / s.flux - 1), fit.x0, fit.y0);
    EXPECT_NEAR(fit.amplitude, s.flux, 0.01 * s.flux) << s.x << ", " << s.y;
    EXPECT_NEAR(fit.x0, s.x, 0.1) << s.x << ", " << s.y;
    EXPECT_NEAR(fit.y0, s.y, 0.1) << s.x << ", " << s.y;
    EXPECT_NEAR(near, s.flux, 0.01 * s.flux + 3.0 * last.noise) << s.x << ", " << s.y;
    EXPECT_EQ(bx, s.x);
    EXPECT_EQ(by, s.y);
    EXPECT_NEAR(rpeak, s.flux, 0.01 * s.flux) << s.x << ", " << s.y;
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) EXPECT_LE(at(restored, s.x + dx, s.y + dy), rpeak) << s.x << ", " << s.y;
    EXPECT_LT(std::abs(at(residual, s.x, s.y)), 3.5 * sigma) << "flux left at " << s.x << ", " << s.y;
  }
  // The per-cycle figures are in the committed report.
  std::ifstream j(out("report.json"));
  std::stringstream text;
  text << j.rdbuf();
  EXPECT_NE(text.str().find("\"loops\""), std::string::npos);
  EXPECT_NE(text.str().find("\"peak_residual_jy\""), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(NoiseSeeds, CleanImagePipeline, ::testing::ValuesIn(seeds(1)));

}  // namespace
