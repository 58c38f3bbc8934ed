// The flow-graph executor on small test stages: ordering, joins, bounded in-flight items,
// failure and Ctrl-C cancellation, output files committed only on success; and the one-stage
// harness's parameter checks, the loader's.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/harness.hpp"
#include "stages/builtin.hpp"
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

TEST_F(Fixture, ItemsInFlightStayBounded) {
  // A slow accumulator: the source must wait instead of filling memory.
  auto p = plan(linear(), {"sum.delay_ms=5", "src.n=40"});
  std::filesystem::current_path(dir.path());
  run_plan(p);
  // Each in-flight item lives as a source block and a scaled copy; allow the limiter's one
  // item of look-ahead in the source.
  EXPECT_LE(Numbers::peak.load(), 2 * (2 + 1) + 1);
  EXPECT_DOUBLE_EQ(read_total("total.txt"), 8.0 * 3 * (39 * 40 / 2));
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
