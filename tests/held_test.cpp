// What a graph holds for a later one (graph/held.hpp, runtime/spill.hpp): payloads written to a
// scratch file and read back as they were, on fixed and fresh random data; the budget that decides
// what stays in memory; clear errors for a scratch directory that is missing or fills up; and
// loops whose data go to the scratch file giving the same results as loops that hold it in memory
// (a stream state, and pipelines/clean_image.yaml's major cycles, bit for bit).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "graph/executor.hpp"
#include "graph/held.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/spill.hpp"
#include "stages/builtin.hpp"
#include "tests/support/clean_image_run.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_stages.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

// A block with every array filled from `seed`, the host-only row arrays included; `n` visibilities.
std::shared_ptr<VisBlock> random_block(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> f(-1e3f, 1e3f);
  auto b = std::make_shared<VisBlock>();
  b->index = std::int64_t(seed % 1000);
  b->skipped = 7;
  b->grid_size = 4096;
  b->max_support = 12;
  b->obs = std::make_shared<Observation>();
  for (auto* a : {&b->uu, &b->vv, &b->ww, &b->weight}) {
    *a = Array<float>::host(n);
    for (auto& x : *a) x = f(rng);
  }
  b->vis = Array<cfloat>::host(n);
  for (auto& x : b->vis) x = {f(rng), f(rng)};
  b->coords = Array<GridCoord>::host(n);
  for (auto& c : b->coords) c = GridCoord{int(rng() % 4096), int(rng() % 4096), std::int16_t(rng() % 300), 1, -2, 1, 0, 9};
  b->antenna1 = Array<std::int32_t>::host(n);
  b->antenna2 = Array<std::int32_t>::host(n);
  for (std::size_t i = 0; i < n; ++i) b->antenna1[i] = int(rng() % 512), b->antenna2[i] = int(rng() % 512);
  b->time = Array<double>::host(n);
  for (auto& t : b->time) t = 5e9 + double(rng() % 100000);
  // `channel` left empty: an array without storage comes back without storage.
  return b;
}

template <class T>
void expect_same(const Array<T>& a, const Array<T>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_EQ(bool(a.storage()), bool(b.storage())) << what;
  if (a.size()) {
    EXPECT_NE(a.data(), b.data()) << what << ": a copy, not the same memory";
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0) << what;
  }
}

void expect_same_block(const VisBlock& a, const VisBlock& b) {
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.skipped, b.skipped);
  EXPECT_EQ(a.grid_size, b.grid_size);
  EXPECT_EQ(a.max_support, b.max_support);
  EXPECT_EQ(a.obs, b.obs);
  expect_same(a.uu, b.uu, "uu");
  expect_same(a.vv, b.vv, "vv");
  expect_same(a.ww, b.ww, "ww");
  expect_same(a.vis, b.vis, "vis");
  expect_same(a.weight, b.weight, "weight");
  expect_same(a.coords, b.coords, "coords");
  expect_same(a.antenna1, b.antenna1, "antenna1");
  expect_same(a.antenna2, b.antenna2, "antenna2");
  expect_same(a.channel, b.channel, "channel");
  expect_same(a.time, b.time, "time");
}

class SpillRoundTrip : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(SpillRoundTrip, BlocksComeBackAsWrittenAndTheShellHoldsNoArray) {
  TempDir dir;
  SpillFile file(dir.path());
  // The file is unlinked at once: nothing to see in the directory, now or later.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  std::vector<std::shared_ptr<VisBlock>> blocks;
  std::vector<std::shared_ptr<const SpillFile::Entry>> entries;
  std::size_t bytes = 0;
  for (std::uint64_t k = 0; k < 5; ++k) {
    blocks.push_back(random_block(GetParam() + k, 1000 + 777 * k));
    each_held_array(*blocks.back(), [&](ArrayBase& a) { bytes += a.bytes(); });
    entries.push_back(file.write(*blocks.back()));
  }
  EXPECT_EQ(file.bytes(), bytes);
  // Read back out of order, twice: each read is a fresh copy equal to what was written.
  for (int k : {3, 0, 4, 1, 2, 3}) {
    auto back = std::dynamic_pointer_cast<VisBlock>(file.read(*entries[std::size_t(k)]));
    ASSERT_TRUE(back);
    expect_same_block(*blocks[std::size_t(k)], *back);
  }
  std::size_t held = 0;
  each_held_array(const_cast<Payload&>(*entries[0]->shell), [&](ArrayBase& a) { held += a.bytes() + a.size(); });
  EXPECT_EQ(held, 0u);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

INSTANTIATE_TEST_SUITE_P(Seeds, SpillRoundTrip, ::testing::ValuesIn(seeds(17)));

TEST(SpillFile, MissingOrFullDirectoryIsAClearError) {
  TempDir dir;
  try {
    SpillFile f(dir / "nowhere");
    FAIL() << "a scratch file in a missing directory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "nowhere").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("run.scratch_dir"), std::string::npos) << e.what();
  }
  FullDisk full(dir / "full");
  if (!full.mounted) GTEST_SKIP() << "no 64 KiB tmpfs (needs root)";
  SpillFile f(full.at);
  auto b = random_block(3, 10000);  // 560 KB: more than the disk holds
  try {
    f.write(*b);
    FAIL() << "560 KB written to a 64 KiB disk";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(full.at.string()), std::string::npos) << e.what();
  }
}

TEST(HoldBudget, StreamItemsPastTheBudgetGoToTheFileOnceItemsStayBytesComeBack) {
  TempDir dir;
  RunOptions run;
  run.hold_memory_mb = 1;
  run.scratch_dir = dir.path().string();
  HoldBudget budget(run);
  ASSERT_EQ(budget.limit(Location::host), std::size_t(1) << 20);
  HeldOutput out;
  std::vector<HeldItem> items;
  std::vector<std::shared_ptr<VisBlock>> blocks;
  // 10 blocks of 8,000 visibilities (56 bytes each with the row arrays: 448 KB; 2 fit in 1 MB).
  std::size_t block = 0;
  for (std::uint64_t k = 0; k < 10; ++k) {
    blocks.push_back(random_block(100 + k, 8000));
    if (!block) each_held_array(*blocks.back(), [&](ArrayBase& a) { block += a.bytes(); });
    items.push_back(budget.hold(blocks.back(), Arity::stream, out, "test.out"));
    EXPECT_LE(budget.used(Location::host), budget.limit(Location::host));
  }
  ASSERT_EQ(block, 8000u * 56);
  ASSERT_TRUE(out.file);
  int spilled = 0;
  for (auto& h : items) spilled += h.spilled();
  EXPECT_EQ(spilled, 8);
  EXPECT_EQ(budget.used(Location::host), 2 * block);
  EXPECT_EQ(out.file->bytes(), 8 * block);
  for (std::size_t k = 0; k < items.size(); ++k)
    if (items[k].spilled()) expect_same_block(*blocks[k], dynamic_cast<const VisBlock&>(*items[k].get()));
    else EXPECT_EQ(items[k].get(), blocks[k]);  // in memory: the item itself
  // A once item stays in memory past the budget, and counts.
  auto big = random_block(7, 24000);
  HeldItem once = budget.hold(big, Arity::once, out, "test.once");
  EXPECT_FALSE(once.spilled());
  EXPECT_EQ(once.get(), big);
  EXPECT_EQ(budget.used(Location::host), 5 * block);
  // Copies share the item's bytes; the last copy gives them back.
  std::vector<HeldItem> copies = items;
  items.clear();
  EXPECT_EQ(budget.used(Location::host), 5 * block);
  copies.clear();
  once = HeldItem();
  EXPECT_EQ(budget.used(Location::host), 0u);
}

// ---------------------------------------------------------------- loops

Registry test_registry() {
  Registry reg;
  register_builtin_stages(reg);
  register_test_stages(reg);
  return reg;
}

double read_total(const std::filesystem::path& p) {
  std::ifstream f(p);
  double v = 0;
  f >> v;
  return v;
}

// stream_state_loop (loop_test's StreamStateAndLoopInvariantStream) with items of 100,000 values (800 KB).
TEST(HeldLoop, StreamStateAndLoopDataInTheScratchFileGiveTheSameResult) {
  TempDir dir;
  Registry reg = test_registry();
  const auto file = dir.write("loop.yaml", stream_state_loop(dir / "total.txt", 100000));
  std::filesystem::create_directories(dir / "scratch");
  RunReport r = run_plan(load_plan(file, {"run.hold_memory_mb=1", "run.scratch_dir=" + (dir / "scratch").string()}, reg));
  EXPECT_DOUBLE_EQ(read_total(dir / "total.txt"), 4.0 * 100000 * (0 + 1 + 2 + 3 + 4 + 5));
  // The source's items (read by every cycle) and the state (held after each cycle) went to scratch files.
  std::map<std::string, HeldReport> held;
  for (auto& h : r.held) held[h.output] = h;
  ASSERT_TRUE(held.count("src.out")) << r.held.size();
  EXPECT_EQ(held["src.out"].items, 6);
  EXPECT_GE(held["src.out"].spilled_items, 5);  // 800 KB items, a 1 MB budget
  ASSERT_TRUE(held.count("add.out"));
  EXPECT_EQ(held["add.out"].items, 6 * 3);  // held after each of the 3 cycles
  EXPECT_GE(held["add.out"].spilled_items, 3 * 4);
  EXPECT_TRUE(std::filesystem::is_empty(dir / "scratch"));
  // Without a budget to speak of nothing spills and the total is the same.
  RunReport m = run_plan(load_plan(file, {}, reg));
  EXPECT_TRUE(m.held.empty());
  EXPECT_DOUBLE_EQ(read_total(dir / "total.txt"), 4.0 * 100000 * (0 + 1 + 2 + 3 + 4 + 5));
}

TEST(HeldLoop, AFullScratchDiskStopsTheRunWithTheStageAndItemAndWritesNothing) {
  TempDir dir;
  FullDisk full(dir / "full");
  if (!full.mounted) GTEST_SKIP() << "no 64 KiB tmpfs (needs root)";
  Registry reg = test_registry();
  const auto file = dir.write("loop.yaml", stream_state_loop(dir / "total.txt", 100000));
  try {
    run_plan(load_plan(file, {"run.hold_memory_mb=1", "run.scratch_dir=" + full.at.string()}, reg));
    FAIL() << "the run went on with a full scratch disk";
  } catch (const StageError& e) {
    EXPECT_EQ(e.stage(), "src");
    EXPECT_GE(e.item(), 1);
    EXPECT_EQ(e.code(), ExitCode::runtime);
    EXPECT_NE(e.reason().find("holding output 'out'"), std::string::npos) << e.reason();
    EXPECT_NE(e.reason().find("No space left"), std::string::npos) << e.reason();
    EXPECT_NE(e.reason().find(full.at.string()), std::string::npos) << e.reason();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "total.txt"));
}

TEST(HeldLoop, CleanImageWithItsVisibilitiesInTheScratchFileIsBitForBitTheSame) {
  TempDir dir;
  Registry reg = test_registry();
  const HeldRuns r = run_in_memory_and_held(std::filesystem::path(UVFLOW_TEST_SOURCE_DIR) / "pipelines/clean_image.yaml",
                                            dir.path(), reg, 2, {"run.hold_memory_mb=1"}, "vis.vis");
  EXPECT_EQ(r.held.spilled_items, r.held.items);  // 8.6 MB blocks, a 1 MB budget
  EXPECT_EQ(r.held.items_on_host, 0);
  for (const char* f : {"restored", "model", "residual"}) {
    const FitsImage a = read_fits_image(dir / ("mem_" + std::string(f) + ".fits"));
    const FitsImage b = read_fits_image(dir / ("disk_" + std::string(f) + ".fits"));
    ASSERT_FALSE(a.pixels.empty()) << f;
    EXPECT_TRUE(a.pixels == b.pixels) << f << ": the images differ";
  }
}

}  // namespace
