// uvw.weight_density and uvw.weighting, cuda backends, against their cpu backends (which
// weighting_test.cpp checks against an independent implementation of WSClean's definitions): the
// same random blocks, uploaded, run through the harness on the device, downloaded and compared;
// and a pipeline that reads its data twice, weighted on the device, against the same pipeline on
// the CPU. Fixed and fresh random seeds. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/uvw/weight_density.hpp"
#include "stages/uvw/weighting.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/weighting_cases.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;


class WeightingGpu : public test::GpuTest {
 protected:
  Blocks uploaded(const Blocks& blocks) {
    Blocks out;
    for (auto& b : blocks) out.push_back(moved(b, Location::device));
    return out;
  }

  std::shared_ptr<const WeightDensity> density(const std::string& backend, const std::shared_ptr<KernelStack>& ks,
                                               const Blocks& blocks) {
    StageHarness h(uvw_weight_density::spec(), backend);
    h.set_input("kernels", ks);
    for (auto& b : blocks) h.process({{"vis", b}});
    h.finish();
    return h.output<WeightDensity>("density");
  }

  Blocks weighted(const std::string& backend, const std::string& mode, double robust, double rank_filter,
                  std::int64_t rank_filter_size, const std::shared_ptr<const WeightDensity>& d, const Blocks& blocks) {
    StageHarness h(uvw_weighting::spec(), backend,
                   {{"mode", mode}, {"robust", robust}, {"rank_filter", rank_filter}, {"rank_filter_size", rank_filter_size}});
    h.set_input("density", d);
    for (auto& b : blocks) h.process({{"vis", b}});
    Blocks out;
    for (std::size_t i = 0; i < blocks.size(); ++i) out.push_back(h.output<VisBlock>("vis", i));
    return out;
  }

};

}  // namespace

TEST_F(WeightingGpu, DensityAndWeightsMatchCpu) {
  for (auto seed : test::seeds(20240917ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (auto [image_size, cell_arcsec, n] : {std::tuple{512, 20.0, 300000}, std::tuple{96, 300.0, 50000}}) {
      SCOPED_TRACE("image " + std::to_string(image_size));
      auto ks = geometry_only_kernels(image_size, cell_arcsec);
      const Blocks blocks{uv_block(random_uv(rng, std::size_t(n), ks->geom.cell_rad), 0), uv_block({}, 1),
                          uv_block(random_uv(rng, std::size_t(n) / 3, ks->geom.cell_rad), 2)};
      const Blocks on_device = uploaded(blocks);

      const auto cpu = density(std::string("cpu"), ks, blocks);
      const auto gpu_d = density(std::string("cuda"), ks, on_device);
      EXPECT_EQ(gpu_d->cells.location(), Location::device);
      EXPECT_EQ(gpu_d->geom, cpu->geom);
      const auto gpu = moved(gpu_d, Location::host);
      ASSERT_EQ(gpu->cells.size(), cpu->cells.size());
      std::size_t bad = 0;
      for (std::size_t k = 0; k < cpu->cells.size(); ++k)
        if (std::abs(gpu->cells[k] - cpu->cells[k]) > 1e-12 * std::max(1.0, cpu->cells[k])) ++bad;
      EXPECT_EQ(bad, 0u) << "density cells differing from the cpu backend";
      EXPECT_NEAR(gpu->totals[0], cpu->totals[0], 1e-12 * cpu->totals[0]);
      EXPECT_NEAR(gpu->totals[1], cpu->totals[1], 1e-12 * cpu->totals[1]);

      // Natural, uniform and briggs with WSClean's rank filter, without it, stronger, and in windows of
      // odd and small sizes.
      struct Case {
        const char* mode;
        double robust, rank_filter;
        std::int64_t size;
      };
      for (const Case& c : {Case{"natural", 0, 3, 16}, Case{"uniform", 0, 3, 16}, Case{"uniform", 0, 0, 16},
                            Case{"uniform", 0, 1.2, 5}, Case{"briggs", -1, 3, 16}, Case{"briggs", 0, 1.2, 16},
                            Case{"briggs", 1.5, 0, 16}, Case{"briggs", 0.5, 1, 2}}) {
        SCOPED_TRACE(std::string(c.mode) + " robust " + std::to_string(c.robust) + " rank filter " +
                     std::to_string(c.rank_filter) + " / " + std::to_string(c.size));
        const Blocks want = weighted("cpu", c.mode, c.robust, c.rank_filter, c.size, cpu, blocks);
        const Blocks got = weighted("cuda", c.mode, c.robust, c.rank_filter, c.size, gpu_d, on_device);
        for (std::size_t b = 0; b < blocks.size(); ++b) {
          EXPECT_EQ(got[b]->weight.location(), Location::device);
          const auto host = moved(got[b], Location::host);
          ASSERT_EQ(host->size(), want[b]->size());
          std::size_t differ = 0;
          for (std::size_t i = 0; i < host->size(); ++i)
            if (std::abs(host->weight[i] - want[b]->weight[i]) > 1e-6f * std::abs(want[b]->weight[i])) ++differ;
          EXPECT_EQ(differ, 0u) << "block " << b << ": weights differing from the cpu backend";
        }
      }
    }
  }
}

// The device cannot throw per visibility: the cuda backend counts invalid input and stops at the
// end of the stream, as the cpu backend stops at the visibility.
TEST_F(WeightingGpu, InvalidInputStopsTheRun) {
  auto ks = geometry_only_kernels(64, 100);
  for (auto pts : {std::vector<UvWeight>{{1, 1, 1.0f}, {NAN, 1, 1.0f}}, std::vector<UvWeight>{{1, 1, -2.0f}}}) {
    StageHarness h(uvw_weight_density::spec(), "cuda");
    h.set_input("kernels", ks);
    h.process({{"vis", moved(std::shared_ptr<const VisBlock>(uv_block(pts)), Location::device)}});
    EXPECT_THROW(h.finish(), InputError);
  }
}

// The two-read pipeline of pipelines/ms_dirty_image.yaml on simulated data, the density and the
// weights on the device (the planner uploads both reads and downloads the weighted blocks), gives
// the image of the same pipeline on the CPU.
TEST_F(WeightingGpu, PipelineOnTheDeviceMatchesCpu) {
  const std::string yaml = R"(schema: uvflow/1
stages:
  - {id: vis, type: io.simulate, params: {preset: tiny, channels: 3, sky_spacing_deg: 2}}
  - {id: vis2, type: io.simulate, params: {preset: tiny, channels: 3, sky_spacing_deg: 2}}
  - {id: kernels, type: kernels.wproj, params: {image_size: 128, cell_arcsec: 200, cache_dir: ""}, in: {info: vis}}
  - {id: density, type: uvw.weight_density, in: {vis: vis, kernels: kernels}}
  - {id: weights, type: uvw.weighting, params: {mode: briggs, robust: -0.5}, in: {vis: vis2.vis, density: density}}
  - {id: grid, type: grid.serial, in: {vis: weights, kernels: kernels}}
  - {id: image, type: fft.grid_to_image, in: {grid: grid}}
  - {id: corr, type: image.grid_correct, in: {image: image, kernels: kernels}}
  - {id: fits, type: io.write_fits, params: {path: dirty.fits}, in: {image: corr}}
)";
  TempDir dir;
  Registry reg;
  register_builtin_stages(reg);
  const auto file = dir.write("p.yaml", yaml);
  auto image = [&](std::vector<std::string> sets, const std::string& name) {
    sets.push_back("fits.path=" + (dir / name).string());
    run_plan(load_plan(file, sets, reg));
    return read_fits_image(dir / name);
  };
  const FitsImage cpu = image({}, "cpu.fits");
  const FitsImage gpu = image({"density.backend=cuda", "weights.backend=cuda"}, "gpu.fits");
  ASSERT_EQ(gpu.pixels.size(), cpu.pixels.size());
  float peak = 0, worst = 0;
  for (std::size_t i = 0; i < cpu.pixels.size(); ++i) {
    peak = std::max(peak, std::abs(cpu.pixels[i]));
    worst = std::max(worst, std::abs(gpu.pixels[i] - cpu.pixels[i]));
  }
  EXPECT_GT(peak, 0.5f);
  EXPECT_LT(worst, 1e-5f * peak);
}
