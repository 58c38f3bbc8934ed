// io.vis_arrays, io.image_arrays and io.collect from C++ (stages/shared/array_feed), without
// Python: what a program hands in is what the blocks and frames hold, in place where nothing is
// dropped, and io.collect returns every payload in item order.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/units.hpp"
#include "stages/io/collect.hpp"
#include "stages/io/image_arrays.hpp"
#include "stages/io/vis_arrays.hpp"
#include "stages/shared/array_feed.hpp"
#include "tests/support/seeds.hpp"

namespace uvflow {
namespace {

struct ArrayFeedStages : ::testing::Test {
  ~ArrayFeedStages() override { array_feed::clear(); }
};

// `rows` rows of 3 channels: uvw in metres, vis and weights random, every 5th visibility flagged.
array_feed::VisArrays make_vis(std::uint64_t seed, std::int64_t rows, bool flagged) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(-1000, 1000);
  array_feed::VisArrays a;
  a.rows = rows;
  a.freq_hz = {1.0e8, 1.2e8, 1.4e8};
  const std::size_t n = std::size_t(rows) * 3;
  a.uvw = Array<double>::host(std::size_t(rows) * 3);
  for (double& x : a.uvw) x = uni(rng);
  a.vis = Array<cfloat>::host(n);
  a.weight = Array<float>::host(n);
  for (std::size_t i = 0; i < n; ++i) {
    a.vis[i] = cfloat(float(uni(rng)), float(uni(rng)));
    a.weight[i] = float(1 + std::abs(uni(rng)) / 1000);
  }
  if (flagged) {
    a.flag = Array<std::uint8_t>::host(n);
    for (std::size_t i = 0; i < n; ++i) a.flag[i] = i % 5 == 0;
  }
  a.ra_rad = 0.5;
  a.dec_rad = -0.7;
  return a;
}

TEST_F(ArrayFeedStages, VisArraysScaleUvwPerChannelAndShareTheArraysWhenNothingIsDropped) {
  for (std::uint64_t seed : test::seeds(17)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    for (bool flagged : {false, true}) {
      array_feed::put("obs", make_vis(seed, 10, flagged));
      const auto a = array_feed::vis("obs");
      StageHarness h(io_vis_arrays::spec(), "cpu", io_vis_arrays::decl, {.name = "obs", .rows_per_block = 4});
      h.run_source();
      const auto info = h.output<VisSetInfo>("info");
      EXPECT_DOUBLE_EQ(info->obs->ra_rad, 0.5);
      ASSERT_EQ(h.outputs("vis").size(), 3u);  // rows 0-3, 4-7, 8-9
      double max_w = 0;
      std::size_t k_all = 0;
      for (std::size_t b = 0; b < 3; ++b) {
        const auto blk = h.output<VisBlock>("vis", b);
        std::size_t k = 0;
        for (std::int64_t r = std::int64_t(b) * 4; r < std::min<std::int64_t>(10, (std::int64_t(b) + 1) * 4); ++r)
          for (std::size_t c = 0; c < 3; ++c) {
            const std::size_t i = std::size_t(r) * 3 + c;
            if (flagged && i % 5 == 0) continue;
            const double s = a->freq_hz[c] / kSpeedOfLight;
            ASSERT_LT(k, blk->size());
            EXPECT_EQ(blk->uu[k], float(a->uvw[3 * r] * s));
            EXPECT_EQ(blk->ww[k], float(a->uvw[3 * r + 2] * s));
            EXPECT_EQ(blk->vis[k], a->vis[i]);
            EXPECT_EQ(blk->weight[k], a->weight[i]);
            EXPECT_EQ(blk->channel[k], std::int32_t(c));
            max_w = std::max(max_w, std::abs(double(float(a->uvw[3 * r + 2] * s))));
            ++k;
          }
        EXPECT_EQ(k, blk->size());
        k_all += k;
        // In place (the handed-in memory) unless flags dropped visibilities.
        const bool shared = blk->vis.data() == a->vis.data() + b * 4 * 3;
        EXPECT_EQ(shared, !flagged);
      }
      EXPECT_EQ(info->obs->total_visibilities, std::int64_t(k_all));
      EXPECT_DOUBLE_EQ(info->obs->max_abs_w, max_w);
      array_feed::clear();
    }
  }
}

TEST_F(ArrayFeedStages, NothingHandedInIsAnInputError) {
  EXPECT_THROW(
      {
        StageHarness h(io_image_arrays::spec(), "cpu", io_image_arrays::decl, {.name = "frames"});
        h.run_source();
      },
      InputError);
}

TEST_F(ArrayFeedStages, ImagesAndCollect) {
  array_feed::ImageArrays in;
  in.nx = 5;
  in.ny = 3;
  auto buffer = Array<float>::host(2 * 15);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = float(i);
  for (int f = 0; f < 2; ++f)
    in.frames.push_back(Array<float>::external(buffer.data() + f * 15, 15, Location::host, buffer.storage()));
  array_feed::put("frames", std::move(in));
  StageHarness src(io_image_arrays::spec(), "cpu", io_image_arrays::decl, {.name = "frames"});
  src.run_source();
  ASSERT_EQ(src.outputs("frames").size(), 2u);
  EXPECT_EQ(src.output<Image>("image")->pixels.data(), buffer.data());
  StageHarness keep(io_collect::spec(), "cpu", io_collect::decl, {.name = "kept"});
  keep.process({{"data", src.outputs("frames")[0]}});
  keep.process({{"data", src.outputs("frames")[1]}});
  const auto kept = array_feed::take("kept");
  ASSERT_EQ(kept.size(), 2u);
  auto first = std::dynamic_pointer_cast<const Image>(kept[0]);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->nx, 5);
  EXPECT_EQ(first->pixels[14], 14.0f);
  EXPECT_EQ(std::dynamic_pointer_cast<const Image>(kept[1])->pixels[0], 15.0f);
  EXPECT_TRUE(array_feed::take("kept").empty());
}

}  // namespace
}  // namespace uvflow
