// The flow-graph executor on small test stages: ordering, joins, bounded in-flight items,
// failure and Ctrl-C cancellation, output files committed only on success.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
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
