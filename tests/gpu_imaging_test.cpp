// The first GPU path: fft.grid_to_image and image.grid_correct cuda backends against their cpu
// backends, and pipelines/dirty_image_gpu.yaml against the same pipeline on the CPU, with the run
// report showing one upload per visibility block, one of the kernel stack and one download of
// the image. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <random>
#include <thread>

#include "graph/device_order.hpp"
#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/harness.hpp"
#include "runtime/pinned_pool.hpp"
#include "stages/builtin.hpp"
#include "stages/fft/grid_to_image.hpp"
#include "stages/image/grid_correct.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/source_dir.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/wproj_stack.hpp"

using namespace uvflow;

namespace {

class GpuImaging : public test::GpuTest {};

double relative_frobenius(const Array<float>& a, const Array<float>& ref) {
  double d = 0, r = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    d += std::pow(double(a[i]) - ref[i], 2);
    r += std::pow(double(ref[i]), 2);
  }
  return std::sqrt(d / r);
}

std::shared_ptr<Grid> random_grid(int N, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  auto grid = std::make_shared<Grid>(Grid::zeros_on_host({n, N, 1e-5}, std::make_shared<Observation>()));
  // A band of data around the centre, like a real grid.
  for (int v = N / 4; v < 3 * N / 4; ++v)
    for (int u = N / 4; u < 3 * N / 4; ++u) grid->cells[std::size_t(v) * N + u] = cfloat(g(rng), g(rng));
  grid->totals[0] = 1234.5;
  return grid;
}

}  // namespace

TEST_F(GpuImaging, GridToImageMatchesCpu) {
  for (unsigned seed : {7u, unsigned(test::fresh_seed())}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto grid = random_grid(320, 256, seed);
    StageHarness cpu(fft_grid_to_image::spec(), "cpu");
    cpu.set_input("grid", grid);
    cpu.process();
    StageHarness gpu(fft_grid_to_image::spec(), "cuda");
    auto on_device = moved(std::shared_ptr<const Grid>(grid), Location::device);
    gpu.set_input("grid", on_device);
    gpu.process();
    auto out = gpu.output<Image>("image");
    EXPECT_EQ(out->pixels.location(), Location::device);
    auto host = moved(std::shared_ptr<const Image>(out), Location::host);
    EXPECT_LT(relative_frobenius(host->pixels, cpu.output<Image>("image")->pixels), 1e-5);
    EXPECT_TRUE(host->wcs.has_value());
    // The transform reads the grid in place (out of place into its own buffer): the grid, which
    // other stages may read too, is left as it was, bit for bit.
    auto grid_after = moved(on_device, Location::host);
    EXPECT_TRUE(std::equal(grid->cells.begin(), grid->cells.end(), grid_after->cells.begin()));
  }
}

// A grid with nothing in it (norm 0: everything flagged) stops the run on the device as on the cpu.
TEST_F(GpuImaging, GridToImageRejectsAnEmptyGridAsTheCpuDoes) {
  auto grid = std::make_shared<Grid>(Grid::zeros_on_host({64, 80, 1e-5}, std::make_shared<Observation>()));
  for (const char* backend : {"cpu", "cuda"}) {
    SCOPED_TRACE(backend);
    StageHarness h(fft_grid_to_image::spec(), backend);
    h.set_input("grid", std::string(backend) == "cpu" ? std::shared_ptr<const Grid>(grid)
                                                       : moved(std::shared_ptr<const Grid>(grid), Location::device));
    try {
      h.process();
      ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "fft.grid_to_image: grid norm is 0.000000: no visibility was gridded");
    }
  }
}

TEST_F(GpuImaging, GridCorrectMatchesCpu) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  auto img = std::make_shared<Image>();
  img->nx = img->ny = 384;
  img->pixels = Array<float>::host(384 * 384);
  for (auto& p : img->pixels) p = g(rng);
  // A real stack: table_correction kernel reads plane 0 (on the device for the cuda backend).
  const auto ks = test::wproj_stack(384, 30, 16);
  for (const char* table : {"kernel", "sinc", "sinc2"}) {
    SCOPED_TRACE(table);
    StageHarness cpu(image_grid_correct::spec(), "cpu", {{"table_correction", std::string(table)}});
    cpu.set_input("image", img);
    cpu.set_input("kernels", ks);
    cpu.process();
    StageHarness gpu(image_grid_correct::spec(), "cuda", {{"table_correction", std::string(table)}});
    gpu.set_input("image", moved(std::shared_ptr<const Image>(img), Location::device));
    gpu.set_input("kernels", moved(ks, Location::device));
    gpu.process();
    auto host = moved(gpu.output<Image>("image"), Location::host);
    EXPECT_LT(relative_frobenius(host->pixels, cpu.output<Image>("image")->pixels), 1e-6);
  }
}

TEST_F(GpuImaging, DirtyImageGpuPipelineMatchesCpuAndCrossesTheBusOnceEachWay) {
  test::TempDir dir;
  Registry reg;
  register_builtin_stages(reg);
  const std::filesystem::path file = test::source_dir() / "pipelines/dirty_image_gpu.yaml";
  const std::vector<std::string> common = {"fits.path=" + (dir / "gpu.fits").string(), "png.path=" + (dir / "gpu.png").string(),
                                           "run.report=", "kernels.cache_dir="};
  RunReport r = run_plan(load_plan(file, common, reg));
  auto cpu_sets = common;
  for (auto s : {"grid.backend=cpu", "image.backend=cpu", "corr.backend=cpu"}) cpu_sets.push_back(s);
  cpu_sets[0] = "fits.path=" + (dir / "cpu.fits").string();
  cpu_sets[1] = "png.path=" + (dir / "cpu.png").string();
  RunReport rc = run_plan(load_plan(file, cpu_sets, reg));

  auto gpu_img = test::read_fits_image(dir / "gpu.fits"), cpu_img = test::read_fits_image(dir / "cpu.fits");
  ASSERT_EQ(gpu_img.pixels.size(), cpu_img.pixels.size());
  double d = 0, ref = 0;
  for (std::size_t i = 0; i < cpu_img.pixels.size(); ++i)
    d += std::pow(double(gpu_img.pixels[i]) - cpu_img.pixels[i], 2), ref += std::pow(double(cpu_img.pixels[i]), 2);
  // The grids agree to 1e-5 (gpu_atomic_test); cuFFT and FFTW then differ by rounding at about
  // that level again (1.03e-5 measured on an H100 for this 512^2 image).
  EXPECT_LT(std::sqrt(d / ref), 3e-5);

  // Transfers: exactly the three the planner inserted, nothing else moved.
  double h2d = 0, d2h = 0;
  int transfers = 0;
  for (auto& m : r.stages) {
    h2d += m.work.bytes_h2d, d2h += m.work.bytes_d2h;
    if (m.type.rfind("transfer.", 0) == 0) ++transfers;
  }
  EXPECT_EQ(transfers, 3);
  EXPECT_EQ(r.stage("vis.vis.to_device").items_in, r.stage("grid").items_in) << "one upload per visibility block";
  EXPECT_EQ(r.stage("kernels.kernels.to_device").items_in, 1);
  EXPECT_EQ(r.stage("corr.image.to_host").items_in, 1);
  EXPECT_DOUBLE_EQ(r.stage("corr.image.to_host").work.bytes_d2h, 512.0 * 512 * sizeof(float));
  EXPECT_DOUBLE_EQ(d2h, 512.0 * 512 * sizeof(float)) << "only the image comes back";

  // The device timeline: each cuda stage's work within the run, and the chain's order on the device
  // (the FFT reads the finished grid, the correction the image, the download the corrected image).
  for (auto& m : r.stages) {
    if (m.backend != "cuda") continue;
    EXPECT_GE(m.device_from, 0) << m.id;
    EXPECT_LE(m.device_from, m.device_to) << m.id;
    EXPECT_LE(m.device_to, r.wall_s) << m.id;
  }
  const double slack = 1e-5;  // the events' resolution is about half a microsecond
  EXPECT_LE(r.stage("grid").device_to, r.stage("image").device_from + slack);
  EXPECT_LE(r.stage("image").device_to, r.stage("corr").device_from + slack);
  EXPECT_LE(r.stage("corr").device_to, r.stage("corr.image.to_host").device_from + slack);
  EXPECT_LE(r.stage("corr.image.to_host").device_to, r.stage("corr.image.to_host").last_output_s + slack)
      << "the download is handed on once it has landed";
  std::printf("dirty_image_gpu: %.3f s wall (CPU pipeline %.3f s); host->device %.1f MB, device->host %.3f MB\n",
              r.wall_s, rc.wall_s, h2d / 1e6, d2h / 1e6);
}

// An end-of-stream call that emitted nothing completes its events when the host records them, which
// may be long after the stage's work: the span is the other calls', unless it has no other call.
TEST_F(GpuImaging, DeviceSpanLeavesOutEndCallsThatEmittedNothing) {
  const auto s = device::Stream::create();
  const std::size_t bytes = std::size_t(256) << 20;
  void* p = device::alloc(bytes, s);
  const device::Event origin = s.record(true);
  DeviceTimes times;
  const device::Event work_start = s.record(true);
  device::memset_zero(p, bytes, s);
  const device::Event work_end = s.record(true);
  times.add(work_start, work_end);
  s.synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const device::Event late = s.record(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  times.add(late, s.record(true), false);  // the empty end call, 20 ms later, its events 1 ms apart
  s.synchronize();
  double from = -1, to = -1;
  ASSERT_TRUE(times.span(origin, 0, from, to));
  EXPECT_NEAR(from, work_start.elapsed_since(origin) / 1e3, 1e-6);
  EXPECT_NEAR(to, work_end.elapsed_since(origin) / 1e3, 1e-6);
  EXPECT_LT(to, 0.01) << "not the end call's time, 20 ms later";
  EXPECT_GT(times.seconds(), 1e-3) << "its time still counts";
  DeviceTimes end_only;
  end_only.add(s.record(true), s.record(true), false);
  s.synchronize();
  EXPECT_TRUE(end_only.span(origin, 0, from, to)) << "a stage whose only call emitted nothing still has a span";
  EXPECT_GT(from, 0.02);
  device::release(p, nullptr, 0);
}

TEST_F(GpuImaging, PinnedPoolHandsOutReusesAndCoalesces) {
  PinnedPool& pool = PinnedPool::global();
  pool.reserve(8 << 20);
  ASSERT_GE(pool.reserved(), std::size_t(8 << 20));
  void* a = pool.allocate(1 << 20);
  void* b = pool.allocate(3000);  // rounded up to a page
  void* c = pool.allocate(2 << 20);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1 << 20);
  EXPECT_EQ(static_cast<char*>(c) - static_cast<char*>(b), 4096);
  EXPECT_TRUE(pool.release(b));
  EXPECT_EQ(pool.allocate(4096), b) << "first fit reuses the freed page";
  EXPECT_EQ(pool.allocate(pool.reserved()), nullptr) << "too big for what is left";
  int outside = 0;
  EXPECT_FALSE(pool.release(&outside));
  EXPECT_TRUE(pool.release(a));
  EXPECT_TRUE(pool.release(b));
  EXPECT_TRUE(pool.release(c));
  void* all = pool.allocate(pool.reserved());
  EXPECT_EQ(all, a) << "freed neighbours coalesce into one block";
  pool.release(all);
  // A pinned host Array comes from the reserve while it fits.
  auto arr = Array<float>::host(1000, true);
  EXPECT_EQ(static_cast<void*>(arr.data()), a);
}
