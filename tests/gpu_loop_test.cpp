// Loops on the GPU: vis.subtract's and vis.unit's cuda backends against their cpu backends (the model's
// uvw shared with the data's, or copies of them compared on the device), and pipelines/clean_image_gpu.yaml against
// pipelines/clean_image.yaml, with the visibilities uploaded once, before the major cycles, and no
// transfer in the loop; and the same pipeline with its device-resident visibilities held in a
// scratch file (run.hold_device_mb) and uploaded again each cycle. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/vis.hpp"
#include "stages/builtin.hpp"
#include "stages/vis/subtract.hpp"
#include "stages/vis/unit.hpp"
#include "tests/support/clean_image_run.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/source_dir.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;

namespace {

class GpuLoop : public test::GpuTest {};

std::shared_ptr<VisBlock> random_vis(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> g;
  auto b = std::make_shared<VisBlock>();
  b->uu = Array<float>::host(n), b->vv = Array<float>::host(n), b->ww = Array<float>::host(n);
  b->vis = Array<cfloat>::host(n), b->weight = Array<float>::host(n);
  for (std::size_t k = 0; k < n; ++k) {
    b->uu[k] = 1000 * g(rng), b->vv[k] = 1000 * g(rng), b->ww[k] = 100 * g(rng);
    b->vis[k] = {g(rng), g(rng)};
    b->weight[k] = 1;
  }
  return b;
}

std::shared_ptr<const VisBlock> subtract(const std::string& backend, std::shared_ptr<const VisBlock> d,
                                         std::shared_ptr<const VisBlock> m) {
  StageHarness h(vis_subtract::spec(), backend);
  h.process({{"data", d}, {"model", m}});
  return h.output<VisBlock>("vis");
}

TEST_F(GpuLoop, SubtractMatchesTheCpuBackend) {
  for (auto seed : test::seeds(61)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto d = random_vis(100003, rng);
    auto m = std::make_shared<VisBlock>(*d);  // shares uvw, as degrid.wproj's output does
    m->vis = random_vis(d->size(), rng)->vis;
    auto want = subtract("cpu", d, m);
    auto dd = moved(std::shared_ptr<const VisBlock>(d), Location::device);
    auto dm = std::make_shared<VisBlock>(*dd);  // the device data's uvw, shared
    dm->vis = moved(std::shared_ptr<const VisBlock>(m), Location::device)->vis;
    auto got = moved(subtract("cuda", dd, dm), Location::host);
    ASSERT_EQ(got->size(), want->size());
    for (std::size_t k = 0; k < want->size(); ++k) ASSERT_EQ(got->vis[k], want->vis[k]) << k;
    // Copies of the uvw (not shared) are compared on the device: equal passes, one change is named.
    auto copied = moved(std::shared_ptr<const VisBlock>(m), Location::device);
    got = moved(subtract("cuda", dd, copied), Location::host);
    for (std::size_t k = 0; k < want->size(); ++k) ASSERT_EQ(got->vis[k], want->vis[k]) << k;
    auto changed = std::make_shared<VisBlock>(*m);
    changed->vv = Array<float>::host(m->size());
    for (std::size_t k = 0; k < m->size(); ++k) changed->vv[k] = m->vv[k];
    changed->vv[77777] += 1;
    try {
      subtract("cuda", dd, moved(std::shared_ptr<const VisBlock>(changed), Location::device));
      ADD_FAILURE() << "a different vv was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("visibility 77777 has another vv"), std::string::npos) << e.what();
    }
  }
}

// vis.unit's cuda backend: ones on the device, every other array the input's (shared, not copied).
TEST_F(GpuLoop, UnitMatchesTheCpuBackend) {
  for (auto seed : test::seeds(62)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto d = random_vis(70001, rng);
    StageHarness cpu(vis_unit::spec(), "cpu");
    cpu.process({{"vis", d}});
    auto want = cpu.output<VisBlock>("vis");
    auto dd = moved(std::shared_ptr<const VisBlock>(d), Location::device);
    StageHarness gpu(vis_unit::spec(), "cuda");
    gpu.process({{"vis", dd}});
    auto on_device = gpu.output<VisBlock>("vis");
    EXPECT_EQ(on_device->ww.storage(), dd->ww.storage());
    EXPECT_EQ(on_device->weight.storage(), dd->weight.storage());
    auto got = moved(on_device, Location::host);
    ASSERT_EQ(got->size(), want->size());
    for (std::size_t k = 0; k < want->size(); ++k) ASSERT_EQ(got->vis[k], want->vis[k]) << k;
  }
}

TEST_F(GpuLoop, CleanImageGpuMatchesTheCpuPipelineVisibilitiesUploadedOnce) {
  test::TempDir dir;
  Registry reg;
  register_builtin_stages(reg);
  auto sets = [&](const std::string& tag) { return test::clean_image_outputs(dir.path(), tag); };
  RunReport g = run_plan(load_plan(test::source_dir() / "pipelines/clean_image_gpu.yaml", sets("gpu"), reg));
  RunReport c = run_plan(load_plan(test::source_dir() / "pipelines/clean_image.yaml", sets("cpu"), reg));
  ASSERT_EQ(g.loops.size(), 1u);
  const std::size_t cycles = g.loops[0].cycles.size();
  std::printf("clean_image_gpu: %zu cycles, %.3f s wall (clean_image on the CPU: %zu cycles, %.3f s)\n", cycles, g.wall_s,
              c.loops[0].cycles.size(), c.wall_s);
  for (auto& cy : g.loops[0].cycles)
    std::printf("  cycle %lld: peak %.5g -> %.5g, noise %.3g, %lld components, %.3f s\n", static_cast<long long>(cy.cycle),
                cy.peak_start, cy.peak, cy.noise, static_cast<long long>(cy.iterations), cy.wall_s);
  EXPECT_EQ(cycles, c.loops[0].cycles.size());
  EXPECT_EQ(g.loops[0].stopped_by, c.loops[0].stopped_by);

  // The same restored image, to the level at which cuFFT and FFTW and the gridders' summation order
  // differ (the minor cycle may pick other noise pixels from there on).
  const auto gi = test::read_fits_image(dir / "gpu_restored.fits"), ci = test::read_fits_image(dir / "cpu_restored.fits");
  ASSERT_EQ(gi.pixels.size(), ci.pixels.size());
  double d = 0, ref = 0;
  for (std::size_t i = 0; i < ci.pixels.size(); ++i)
    d += std::pow(double(gi.pixels[i]) - ci.pixels[i], 2), ref += std::pow(double(ci.pixels[i]), 2);
  std::printf("restored images: relative difference %.3g\n", std::sqrt(d / ref));
  EXPECT_LT(std::sqrt(d / ref), 1e-3);

  // The data go up once, before the loop, and nothing crosses the bus in the loop (deconv.hogbom and
  // image.zeros run on the device): the visibilities move block by block, once (vis.unit makes the
  // PSF's unit visibilities on the device from the same upload); every other transfer moves one
  // item, once.
  const std::int64_t blocks = g.stage("vis").items_in;
  EXPECT_EQ(g.stage("vis.vis.to_device").items_in, blocks);
  EXPECT_EQ(g.stage("unit").backend, "cuda");
  EXPECT_EQ(g.stage("predict").items_in, blocks * std::int64_t(cycles));
  EXPECT_EQ(g.stage("clean").backend, "cuda");
  double h2d = 0, d2h = 0;
  for (auto& m : g.stages) {
    h2d += m.work.bytes_h2d, d2h += m.work.bytes_d2h;
    if (m.type.rfind("transfer.", 0) == 0 && m.id != "vis.vis.to_device") {
      EXPECT_EQ(m.items_in, 1) << m.id;
    }
  }
  std::printf("bus: host->device %.1f MB, device->host %.1f MB over %zu cycles\n", h2d / 1e6, d2h / 1e6, cycles);
}

// The same images but for the order of the device gridder's float atomics.
void expect_same_images(const test::TempDir& dir) {
  for (const char* f : {"restored", "model", "residual"}) {
    const auto a = test::read_fits_image(dir / ("mem_" + std::string(f) + ".fits"));
    const auto b = test::read_fits_image(dir / ("disk_" + std::string(f) + ".fits"));
    ASSERT_EQ(a.pixels.size(), b.pixels.size());
    double d = 0, ref = 0;
    for (std::size_t i = 0; i < a.pixels.size(); ++i)
      d += std::pow(double(a.pixels[i]) - b.pixels[i], 2), ref += std::pow(double(a.pixels[i]), 2);
    std::printf("%s: relative difference %.3g\n", f, std::sqrt(d / ref));
    EXPECT_LT(std::sqrt(d / ref), 1e-5) << f;
  }
}

// Past the device budget the blocks are held in (pinned) host memory and copied up each cycle.
TEST_F(GpuLoop, DeviceVisibilitiesPastTheDeviceBudgetAreHeldOnTheHost) {
  test::TempDir dir;
  Registry reg;
  register_builtin_stages(reg);
  const auto r = test::run_in_memory_and_held(test::source_dir() / "pipelines/clean_image_gpu.yaml", dir.path(), reg, 3,
                                              {"run.hold_device_mb=1"}, "vis.vis.to_device.data");
  EXPECT_EQ(r.held.items_on_host, r.held.items);
  EXPECT_EQ(r.held.spilled_items, 0);
  EXPECT_EQ(r.disk.stage("predict").items_in, r.mem.stage("predict").items_in);
  expect_same_images(dir);
}

// Past both budgets they go to the scratch file, and back to the device each cycle.
TEST_F(GpuLoop, DeviceVisibilitiesPastBothBudgetsGoToTheScratchFileAndBack) {
  test::TempDir dir;
  Registry reg;
  register_builtin_stages(reg);
  const auto r = test::run_in_memory_and_held(test::source_dir() / "pipelines/clean_image_gpu.yaml", dir.path(), reg, 3,
                                              {"run.hold_device_mb=1", "run.hold_memory_mb=1"}, "vis.vis.to_device.data");
  EXPECT_EQ(r.held.spilled_items, r.held.items);
  EXPECT_EQ(r.held.items_on_host, 0);
  EXPECT_EQ(r.disk.stage("predict").items_in, r.mem.stage("predict").items_in);
  expect_same_images(dir);
}

}  // namespace
