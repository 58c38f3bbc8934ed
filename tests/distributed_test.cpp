// The parts of distributed runs that need no mpirun (tests/mpi_test.sh runs the rest under it):
// how a source shares its stream, the plan a rank other than 0 runs, and the rank reports'
// JSON round trip.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "graph/pipeline.hpp"
#include "graph/ranks.hpp"
#include "graph/report.hpp"
#include "runtime/device.hpp"
#include "runtime/dist.hpp"
#include "stages/builtin.hpp"
#include "stages/shared/share.hpp"
#include "support/source_dir.hpp"

using namespace uvflow;

TEST(Share, EveryItemOnExactlyOneRank) {
  for (int size : {1, 2, 3, 4, 7})
    for (std::int64_t n : {0, 1, 5, 8, 13}) {
      std::multiset<std::int64_t> seen;
      for (int rank = 0; rank < size; ++rank) {
        const Share s(rank, size);
        for (std::int64_t i = 0; i < s.count(n); ++i) {
          const std::int64_t g = s.global(i);
          EXPECT_TRUE(s.mine(g)) << rank << " of " << size;
          EXPECT_EQ(g % size, rank);
          seen.insert(g);
        }
      }
      ASSERT_EQ(std::int64_t(seen.size()), n) << size << " ranks, " << n << " items";
      std::int64_t expect = 0;
      for (auto g : seen) EXPECT_EQ(g, expect++);  // 0 .. n-1, each once
    }
}

TEST(Share, OneProcessIsTheWholeStream) {
  EXPECT_EQ(dist::size(), 1);  // not started by mpirun
  const Share s(true);
  EXPECT_EQ(s.count(9), 9);
  EXPECT_EQ(s.global(4), 4);
  EXPECT_FALSE(s.split());
}

TEST(PlanForRank, OtherRanksLeaveOutWhatFollowsTheGridReduction) {
  Registry reg;
  register_builtin_stages(reg);
  // The cuda FFT puts inserted transfers after the reduction too: they go with it.
  const Plan plan = load_plan(test::source_dir() / "pipelines/dirty_image_mpi.yaml", {"image.backend=cuda"}, reg);
  EXPECT_EQ(plan_for_rank(plan, 0).stages.size(), plan.stages.size());
  const Plan mine = plan_for_rank(plan, 1);
  std::set<std::string> ids, all;
  for (auto& st : mine.stages) ids.insert(st.id);
  for (auto& st : plan.stages) all.insert(st.id);
  for (const char* gone : {"image", "corr", "fits", "grid_sum.grid.to_device", "image.image.to_host"}) {
    EXPECT_TRUE(all.count(gone)) << gone;
    EXPECT_FALSE(ids.count(gone)) << gone;
  }
  for (const char* kept : {"vis", "vis2", "kernels", "density", "density_sum", "weights", "grid", "grid_sum"})
    EXPECT_TRUE(ids.count(kept)) << kept;
  EXPECT_EQ(mine.stages.size() + 5, plan.stages.size());
  // Every link still names the producer it named in the whole plan, and comes before its consumer.
  for (std::size_t i = 0; i < mine.stages.size(); ++i) {
    const StageInstance& st = mine.stages[i];
    const StageInstance* whole = nullptr;
    for (auto& w : plan.stages)
      if (w.id == st.id) whole = &w;
    ASSERT_NE(whole, nullptr);
    ASSERT_EQ(st.inputs.size(), whole->inputs.size());
    for (std::size_t k = 0; k < st.inputs.size(); ++k) {
      ASSERT_GE(st.inputs[k].from, 0);
      ASSERT_LT(std::size_t(st.inputs[k].from), i);
      EXPECT_EQ(mine.stages[std::size_t(st.inputs[k].from)].id, plan.stages[std::size_t(whole->inputs[k].from)].id);
    }
  }
}

// One rank per GPU: a node's ranks take its devices round robin; without devices, device 0 (the
// run then has no cuda stage, or fails naming the missing device).
TEST(DeviceForRank, NodeRanksTakeTheDevicesRoundRobin) {
  const int two[] = {0, 1, 0, 1, 0};
  for (int r = 0; r < 5; ++r) EXPECT_EQ(device::for_local_rank(r, 2), two[r]) << "local rank " << r;
  for (int r = 0; r < 5; ++r) EXPECT_EQ(device::for_local_rank(r, 1), 0);
  EXPECT_EQ(device::for_local_rank(3, 8), 3);
  EXPECT_EQ(device::for_local_rank(3, 0), 0);
  EXPECT_EQ(dist::local_rank(), 0);  // one process
}

TEST(RankReports, JsonRoundTripAndTotals) {
  RunReport r;
  r.pipeline = "p";
  r.file = "p.yaml";
  r.device = "host";
  r.wall_s = 2.5;
  r.rank = 3;
  r.local_rank = 1;
  r.communication_s = 0.25;
  r.stages.push_back({.id = "grid", .type = "grid.tiled", .backend = "cpu", .items_in = 4, .wall_s = 1.5,
                      .device_from = 0.125, .device_to = 0.75, .work = {.visibilities = 100, .updates = 4900}});
  const RunReport back = report_from_json(report_json(r));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.local_rank, 1);
  EXPECT_DOUBLE_EQ(back.communication_s, 0.25);
  EXPECT_DOUBLE_EQ(back.wall_s, 2.5);
  ASSERT_EQ(back.stages.size(), 1u);
  EXPECT_EQ(back.stages[0].id, "grid");
  EXPECT_EQ(back.stages[0].items_in, 4);
  EXPECT_DOUBLE_EQ(back.stages[0].work.updates, 4900);
  EXPECT_DOUBLE_EQ(back.stages[0].device_from, 0.125);
  EXPECT_DOUBLE_EQ(back.stages[0].device_to, 0.75);

  RunReport root = r;
  root.rank = 0;
  root.ranks = {root, back};
  const std::string text = format_report(root);
  EXPECT_NE(text.find("2 ranks:"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3 on host: 2.500 s wall, 0.250 s communication"), std::string::npos) << text;
  // The grid stage summed over both ranks: 8 items, 3000 ms.
  EXPECT_NE(text.find("grid                               2        8      3000.00"), std::string::npos) << text;
}
