// The flow-graph executor on small test stages: ordering, joins, bounded in-flight items,
// failure and Ctrl-C cancellation, output files committed only on success; and the one-stage
// harness's parameter checks, the loader's.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "graph/watcher.hpp"
#include "runtime/harness.hpp"
#include "runtime/units.hpp"
#include "stages/builtin.hpp"
#include "stages/grid/tiled.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_stages.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

struct Fixture : ::testing::Test {
  Registry reg;
  TempDir dir;
  void SetUp() override {
    register_builtin_stages(reg);
    register_test_stages(reg);
    sum_order().clear();
    Numbers::peak = Numbers::alive.load();
  }
  Plan plan(const std::string& yaml, std::vector<std::string> sets = {}) {
    return load_plan(dir.write("p.yaml", yaml), sets, reg);
  }
  double read_total(const std::string& name) {
    std::ifstream f(dir / name);
    double x = -1;
    f >> x;
    return x;
  }
};

std::string linear(const std::string& extra_stage = "", const std::string& sum_input = "scale") {
  return R"(schema: uvflow/1
name: linear
run: {max_in_flight: 2}
stages:
  - {id: src, type: test.source, params: {n: 50, size: 8}}
  - {id: scale, type: test.scale, params: {factor: 3}, in: {in: src}}
)" + extra_stage + R"(  - {id: sum, type: test.sum, in: {in: )" + sum_input + R"(}}
  - {id: out, type: test.write_total, params: {path: total.txt}, in: {in: sum}}
)";
}

}  // namespace

TEST_F(Fixture, LinearPipelineSumsInStreamOrder) {
  auto p = plan(linear());
  std::filesystem::current_path(dir.path());
  RunReport r = run_plan(p);
  // sum over k of 8 * 3k for k < 50
  EXPECT_DOUBLE_EQ(read_total("total.txt"), 8.0 * 3 * (49 * 50 / 2));
  ASSERT_EQ(sum_order().size(), 50u);
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ(sum_order()[i], std::int64_t(i));
  ASSERT_EQ(r.stages.size(), 4u);
  EXPECT_EQ(r.stages[0].items_out, 50);
  EXPECT_EQ(r.stages[1].items_in, 50);
}

// A slow accumulator: the source waits instead of filling memory, with every bound, 1 included.
// The source's input_node keeps a copy of the last item it handed out, so a permit carried in that
// item outlived the item: max_in_flight 1 stalled the run ("never finished").
TEST_F(Fixture, EveryInFlightBoundRunsToTheEndAndHoldsIt) {
  for (int m : {1, 2, 3}) {
    SCOPED_TRACE("max_in_flight " + std::to_string(m));
    Numbers::peak = Numbers::alive.load();
    auto p = plan(linear(), {"sum.delay_ms=3", "src.n=30", "run.max_in_flight=" + std::to_string(m)});
    std::filesystem::current_path(dir.path());
    run_plan(p);
    EXPECT_DOUBLE_EQ(read_total("total.txt"), 8.0 * 3 * (29 * 30 / 2));
    // An in-flight item lives as a source block and its scaled copy.
    EXPECT_LE(Numbers::peak.load(), 2 * m);
  }
}

TEST_F(Fixture, FanOutAndJoinMatchItemsByIndex) {
  auto p = plan(R"(schema: uvflow/1
stages:
  - {id: src, type: test.source, params: {n: 30, size: 3}}
  - {id: a, type: test.scale, params: {factor: 2}, in: {in: src}}
  - {id: b, type: test.scale, params: {factor: 5}, in: {in: src}}
  - {id: j, type: test.join, in: {a: a, b: b}}
  - {id: sum, type: test.sum, in: {in: j}}
  - {id: out, type: test.write_total, params: {path: t.txt}, in: {in: sum}}
)");
  std::filesystem::current_path(dir.path());
  run_plan(p);
  EXPECT_DOUBLE_EQ(read_total("t.txt"), 3.0 * 7 * (29 * 30 / 2));
}

TEST_F(Fixture, EmptyStreamStillFinishes) {
  auto p = plan(linear(), {"src.n=0"});
  std::filesystem::current_path(dir.path());
  run_plan(p);
  EXPECT_DOUBLE_EQ(read_total("total.txt"), 0.0);
}

TEST_F(Fixture, FailureMidStreamCancelsAndLeavesNoFile) {
  auto p = plan(linear("  - {id: boom, type: test.fail, params: {at: 7}, in: {in: scale}}\n", "boom"));
  std::filesystem::current_path(dir.path());
  try {
    run_plan(p);
    FAIL() << "expected a StageError";
  } catch (const StageError& e) {
    EXPECT_EQ(e.stage(), "boom");
    EXPECT_EQ(e.item(), 7);
    EXPECT_EQ(e.backend(), "cpu");
    EXPECT_EQ(e.code(), ExitCode::runtime);
    EXPECT_EQ(std::string(e.what()), "stage 'boom' (backend cpu, host, item 7): deliberate failure");
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "total.txt"));
  for (auto& f : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(f.path().filename(), "p.yaml") << "left behind: " << f.path();
  // Fewer items were processed than the stream held: the run stopped.
  EXPECT_LT(sum_order().size(), 50u);
}

TEST_F(Fixture, InputErrorInPrepareHasItsOwnExitCode) {
  auto p = plan(linear(), {"src.fail_on_open=true"});
  try {
    run_plan(p);
    FAIL();
  } catch (const StageError& e) {
    EXPECT_EQ(e.code(), ExitCode::input);
    EXPECT_NE(std::string(e.what()).find("column TEST"), std::string::npos);
  }
}

TEST_F(Fixture, InterruptCancelsTheRun) {
  auto p = plan(linear(), {"src.delay_ms=20", "src.n=1000"});
  std::filesystem::current_path(dir.path());
  std::thread t([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    request_interrupt();
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(run_plan(p), Interrupted);
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_FALSE(std::filesystem::exists(dir / "total.txt"));
}

// Ctrl-C between loading the plan and starting it (the handler is already installed) is not lost;
// the next run starts clean.
TEST_F(Fixture, InterruptBeforeTheRunCancelsItAndOnlyIt) {
  auto p = plan(linear(), {"src.delay_ms=1", "src.n=5"});
  std::filesystem::current_path(dir.path());
  request_interrupt();
  EXPECT_THROW(run_plan(p), Interrupted);
  EXPECT_FALSE(std::filesystem::exists(dir / "total.txt"));
  run_plan(p);
  EXPECT_TRUE(std::filesystem::exists(dir / "total.txt"));
}

namespace {

// A stage with one parameter of each checked kind, which does nothing.
StageSpec checked_spec() {
  struct Idle : Stage {
    void process(Context&) override {}
  };
  StageSpec s{"test.checked", "parameters with ranges and choices"};
  s.params = {{.name = "count", .type = ParamType::integer, .def = std::int64_t(1), .min = 0, .max = 10, .doc = "an integer"},
              {.name = "gain", .type = ParamType::number, .def = 1.0, .unit = "dB", .min = -3, .max = 3, .doc = "a number"},
              {.name = "taps", .type = ParamType::numbers, .def = std::vector<double>{}, .min = 0, .max = 1, .doc = "numbers"},
              {.name = "mode", .type = ParamType::choice, .def = std::string("fast"), .choices = {"fast", "exact"},
               .doc = "a choice"}};
  s.backends = {{"cpu", [] { return std::unique_ptr<Stage>(std::make_unique<Idle>()); }}};
  return s;
}

// The message of the std::invalid_argument the harness throws for these parameters ("" if none).
std::string harness_error(std::map<std::string, ParamValue> params) {
  try {
    StageHarness h(checked_spec(), "cpu", std::move(params));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// The harness checks given values as the pipeline loader does, with the loader's message naming
// the stage type and the parameter.
TEST(Harness, RejectsAValueOutOfItsRange) {
  EXPECT_EQ(harness_error({{"count", std::int64_t(11)}}),
            "test.checked parameter 'count' = 11 is out of range [0, 10]");
  EXPECT_EQ(harness_error({{"gain", 3.5}}), "test.checked parameter 'gain' = 3.5 is out of range [-3, 3] dB");
  EXPECT_EQ(harness_error({{"gain", std::int64_t(-4)}}),  // an integer for a number: converted, then checked
            "test.checked parameter 'gain' = -4 is out of range [-3, 3] dB");
  EXPECT_EQ(harness_error({{"taps", std::vector<double>{0.5, 2}}}),
            "test.checked parameter 'taps' = 2 is out of range [0, 1]");
}

TEST(Harness, RejectsAnUnknownChoice) {
  EXPECT_EQ(harness_error({{"mode", std::string("slow")}}),
            "test.checked parameter 'mode' must be one of fast, exact, got 'slow'");
}

TEST(Harness, AcceptsValuesInRangeAndKnownChoices) {
  EXPECT_EQ(harness_error({{"count", std::int64_t(10)},
                           {"gain", -3.0},
                           {"taps", std::vector<double>{0, 1}},
                           {"mode", std::string("exact")}}),
            "");
  EXPECT_EQ(harness_error({}), "");  // the defaults
}

// The loader reports the same text for the same value (plus where it was written).
TEST_F(Fixture, LoaderAndHarnessShareTheRangeMessage) {
  try {
    plan(linear(), {"scale.factor=300"});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 'scale' (test.scale) parameter 'factor' = 300 is out of range [-100, 100]"),
              std::string::npos)
        << e.what();
  }
  const StageSpec* scale = reg.find("test.scale");
  ASSERT_NE(scale, nullptr);
  try {
    StageHarness h(*scale, "cpu", {{"factor", 300.0}});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "test.scale parameter 'factor' = 300 is out of range [-100, 100]");
  }
}

// ------------------------------------------------------------------------------ shapes before the run

namespace {

// What test.probe's prepare() was told of its input.
PortShape& probed() {
  static PortShape s;
  return s;
}

StageSpec probe_spec() {
  struct Probe : Stage {
    void prepare(PrepareContext& pc) override { probed() = pc.input("in"); }
    void process(Context&) override {}
  };
  StageSpec s{.type = "test.probe", .summary = "keeps the shape prepare() is told its input has"};
  s.inputs = {PortSpec{.name = "in", .type = "Image", .arity = Arity::once, .residency = Residency::host}};
  s.backends = {{"cpu", [] { return std::unique_ptr<Stage>(std::make_unique<Probe>()); }}};
  return s;
}

}  // namespace

// kernels.wproj describes the geometry from its parameters; the gridder, the FFT and the grid
// correction pass it on, and a stage's prepare() (here in a dry run, as `uvflow check` does) is told
// its input's shape. A 200-pixel image padded 1.3 times: the smallest even 2^a 3^b 5^c above 259 is
// 270 (260 = 2^2 5 13, ..., 268 = 2^2 67 are not).
TEST_F(Fixture, PrepareIsToldTheShapesThePlannerDescribed) {
  reg.add(probe_spec());
  probed() = PortShape{};
  auto p = plan(R"(schema: uvflow/1
name: shapes
stages:
  - {id: vis, type: io.simulate, params: {preset: small}}
  - {id: kernels, type: kernels.wproj, params: {image_size: 200, cell_arcsec: 30, padding: 1.3}, in: {info: vis}}
  - {id: sort, type: uvw.w_sort, in: {vis: vis, kernels: kernels}}
  - {id: grid, type: grid.serial, in: {vis: sort, kernels: kernels}}
  - {id: image, type: fft.grid_to_image, in: {grid: grid}}
  - {id: corr, type: image.grid_correct, in: {image: image, kernels: kernels}}
  - {id: probe, type: test.probe, in: {in: corr}}
)");
  const GridGeometry want{.image_size = 200, .grid_size = 270, .cell_rad = 30 * kArcsecToRad};
  auto output = [&](const std::string& id, const std::string& port) -> const PortShape& {
    for (auto& st : p.stages)
      if (st.id == id) return st.outputs.at(port).shape;
    throw std::logic_error("no stage " + id);
  };
  ASSERT_TRUE(output("kernels", "kernels").grid);
  EXPECT_EQ(*output("kernels", "kernels").grid, want);
  EXPECT_FALSE(output("kernels", "kernels").sized());  // the planes depend on the data
  EXPECT_EQ(output("grid", "grid").nx, 270);
  EXPECT_EQ(output("image", "image").nx, 200);
  EXPECT_EQ(output("vis", "vis").nx, 0);  // io.simulate describes nothing: unknown
  dry_run_prepare(p);
  EXPECT_EQ(probed().nx, 200);
  EXPECT_EQ(probed().ny, 200);
  EXPECT_EQ(probed().items, 1);
  ASSERT_TRUE(probed().grid);
  EXPECT_EQ(*probed().grid, want);
}

// grid.tiled makes its grid in prepare() when its kernels' geometry is described: finish() then
// emits it without reading the kernel stack (none is given here). Undescribed, it still needs the
// stack, as a stage whose producer describes nothing must keep working.
TEST(Prepare, GridTiledMakesItsGridFromTheDescribedGeometry) {
  const GridGeometry g{.image_size = 40, .grid_size = 48, .cell_rad = 1e-4};
  StageHarness h(grid_tiled::spec(), "cpu", grid_tiled::decl, {}, {{"kernels", PortShape{.items = 1, .grid = g}}});
  h.finish();
  auto grid = h.output<Grid>("grid");
  EXPECT_EQ(grid->geom, g);
  ASSERT_EQ(grid->cells.size(), 48u * 48u);
  EXPECT_TRUE(std::all_of(grid->cells.begin(), grid->cells.end(), [](cfloat c) { return c == cfloat(0); }));
  EXPECT_EQ(grid->gridded(), 0);
  StageHarness undescribed(grid_tiled::spec(), "cpu", grid_tiled::decl, {});
  EXPECT_THROW(undescribed.finish(), std::logic_error);
}

// ---- Outputs, signals and errors (docs/reliability.md)

// The report is committed with the outputs: one that cannot be written fails the run before it
// computes, and nothing is written (no output, no temporary).
TEST_F(Fixture, ReportIsCommittedWithTheOutputsOrNothingIs) {
  auto p = plan(linear(), {"src.n=3"});
  std::filesystem::current_path(dir.path());
  dir.write("notadir", "");
  try {
    run_plan(p, ExecOptions{.report = "notadir/r.json"});
    FAIL() << "expected an OutputError";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("notadir/r.json"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(sum_order().empty()) << "the run computed before failing";
  for (auto& f : std::filesystem::directory_iterator(dir.path()))
    EXPECT_TRUE(f.path().filename() == "p.yaml" || f.path().filename() == "notadir") << "left behind: " << f.path();
  RunReport r = run_plan(p, ExecOptions{.report = "out/r.json"});
  std::ifstream in(dir / "out/r.json");
  std::string json((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(json.find("\"total.txt\""), std::string::npos) << json;
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0], "total.txt");
}

// SIGTERM, SIGHUP and SIGQUIT cancel the run as SIGINT does; the process exits 128 + the signal.
TEST_F(Fixture, InterruptCarriesItsSignal) {
  auto p = plan(linear(), {"src.delay_ms=1", "src.n=5"});
  std::filesystem::current_path(dir.path());
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    request_interrupt(sig);
    try {
      run_plan(p);
      FAIL() << "expected Interrupted";
    } catch (const Interrupted& e) {
      EXPECT_EQ(e.signal(), sig);
      EXPECT_EQ(e.exit_code(), 128 + sig);
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "total.txt"));
}

// A stage that fails while it is set up says "setup", not "end of stream".
TEST_F(Fixture, SetupErrorIsLabelledSetup) {
  auto p = plan(linear(), {"src.fail_on_open=true"});
  try {
    run_plan(p);
    FAIL();
  } catch (const StageError& e) {
    EXPECT_EQ(e.item(), StageError::kSetup);
    EXPECT_EQ(std::string(e.what()).rfind("stage 'src' (backend cpu, setup): prepare: ", 0), 0u) << e.what();
  }
}

// Out of memory in a stage names the stage, the item and the size asked for.
TEST_F(Fixture, OutOfMemoryNamesStageItemAndSize) {
  auto p = plan(linear("  - {id: big, type: test.crash, params: {at: 2, how: alloc}, in: {in: scale}}\n", "big"));
  std::filesystem::current_path(dir.path());
  try {
    run_plan(p);
    FAIL();
  } catch (const StageError& e) {
    EXPECT_EQ(e.code(), ExitCode::runtime);
    EXPECT_EQ(std::string(e.what()),
              "stage 'big' (backend cpu, host, item 2): out of memory: could not allocate 268435456.0 GiB for a host array");
  }
}

// The watcher runs each job's continuation as soon as its events are done; what a job kept alive is
// dropped on another thread, so a slow release (freeing large host arrays) does not hold back the
// next continuation (a download's hand-off). The graph still waits for every drop.
TEST(DeviceWatcher, SlowDropsDoNotHoldBackLaterContinuations) {
  // The first job's release waits until the second continuation has run: if continuations waited
  // for drops, it would wait out its 20 s and say so. No timing assumption otherwise.
  struct FreedAfterTheSecond {
    FreedAfterTheSecond(std::atomic<bool>* s, std::atomic<int>* o) : second_ran(s), outcome(o) {}
    std::atomic<bool>* second_ran;
    std::atomic<int>* outcome;  // 0 not freed, 1 freed after the second ran, 2 gave up waiting
    ~FreedAfterTheSecond() {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!*second_ran && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      *outcome = *second_ran ? 1 : 2;
    }
  };
  tbb::flow::graph g;
  Watcher w(g);
  w.start();
  std::atomic<bool> first_ran{false}, second_ran{false};
  std::atomic<int> outcome{0};
  // The job holds the only reference: had this thread kept one, the watcher could run and drop the
  // job before this thread let go, and the release would then run here, before the second after().
  w.after({}, [slow = std::make_shared<FreedAfterTheSecond>(&second_ran, &outcome), &first_ran] { first_ran = true; });
  w.after({}, [&second_ran] { second_ran = true; });
  g.wait_for_all();
  EXPECT_TRUE(first_ran);
  EXPECT_NE(outcome, 0) << "wait_for_all returned before the first job's drop";
  EXPECT_NE(outcome, 2) << "the second continuation waited for the first job's drop";
  w.stop();
}
