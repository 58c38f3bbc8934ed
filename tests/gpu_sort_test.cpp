// The cuda backends of uvw.w_sort, uvw.bounding_box, tiles.count and tiles.bucket_sort against
// their cpu backends (which gridding_test.cpp checks against brute force): random kernel stacks,
// random visibilities with footprints on and past every grid edge, both signs of w, thousands in
// one cell; every output array on the device; the device chain, downloaded and gridded by the CPU
// grid.tiled, against the CPU chain; and non-finite uvw, an input error at the end of the stream.
// Fixed and fresh random seeds. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/payloads/tiles.hpp"
#include "stages/grid/tiled.hpp"
#include "stages/tiles/bucket_sort.hpp"
#include "stages/tiles/count.hpp"
#include "stages/uvw/bounding_box.hpp"
#include "stages/shared/placement.hpp"
#include "stages/shared/tiles.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/seeds.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

using Blocks = std::vector<std::shared_ptr<const VisBlock>>;


template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

struct Tiles {
  int u, v;
  std::string str() const { return "tiles " + std::to_string(u) + "x" + std::to_string(v); }
};

struct Shape {
  int planes, max_support, oversample, grid_size;
  std::size_t vis;
  std::vector<Tiles> tilings;
  std::string str() const {
    return std::to_string(planes) + " planes, max support " + std::to_string(max_support) + ", oversample " +
           std::to_string(oversample) + ", grid " + std::to_string(grid_size);
  }
};

// Many planes make radix keys of 12 bits (two passes), one plane keys of one bit; supports above
// the tile size make footprints that meet many tiles; 1x1 tiles the most tiles per footprint.
const std::vector<Shape> kShapes = {
    {16, 8, 4, 256, 20000, {{64, 64}, {16, 8}, {7, 13}, {1, 1}}},
    {5, 40, 8, 512, 3000, {{16, 16}, {64, 32}}},
    {1, 3, 2, 64, 5000, {{8, 8}, {1, 1}}},
    {3000, 6, 4, 256, 30000, {{32, 32}}},
    {32, 16, 4, 1024, 300000, {{64, 64}, {32, 32}}},
};

// A block's visibilities: random, on and past every edge, and thousands in one cell.
std::vector<VisAt> mixed_case(std::mt19937_64& rng, const KernelStack& ks, std::size_t n) {
  std::int64_t outside = 0;
  std::vector<VisAt> v = random_vis(rng, ks, n);
  const auto edges = edge_vis(rng, ks, &outside);
  const auto hot = hot_cell_vis(rng, ks, 3000, 2, -1);  // thousands in one cell, near the centre
  v.insert(v.end(), edges.begin(), edges.end());
  v.insert(v.end(), hot.begin(), hot.end());
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

// Every array of every output payload is in device memory.
void expect_on_device(const Payload& p, const std::string& what) {
  int i = 0;
  p.clone()->arrays([&](ArrayBase& a) {
    EXPECT_EQ(a.location(), Location::device) << what << ", array " << i;
    ++i;
  });
}

// One block through the four stages.
struct Sorted {
  std::shared_ptr<const VisBlock> placed;
  std::shared_ptr<const BoundingBox> box;
  std::shared_ptr<const TileCounts> counts;
  std::shared_ptr<const TileBuckets> buckets;
};

class GpuSort : public test::GpuTest {
 protected:
  // The chain of one backend over `blocks` (at that backend's side). The cuda outputs are checked
  // to be device-resident, then downloaded.
  std::vector<Sorted> chain(const std::string& backend, std::shared_ptr<const KernelStack> ks, const Blocks& blocks,
                            Tiles t, const std::string& order = "any") {
    const bool cuda = backend == "cuda";
    StageHarness sort(uvw_w_sort::spec(), backend), box(uvw_bounding_box::spec(), backend);
    StageHarness count(tiles_count::spec(), backend, {{"tile_u", std::int64_t(t.u)}, {"tile_v", std::int64_t(t.v)}});
    StageHarness bucket(tiles_bucket_sort::spec(), backend, {{"order", order}});
    sort.set_input("kernels", ks);
    std::vector<Sorted> out;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      Sorted s;
      sort.process({{"vis", blocks[i]}});
      s.placed = sort.output<VisBlock>("vis", i);
      box.process({{"vis", s.placed}});
      s.box = box.output<BoundingBox>("box", i);
      count.process({{"vis", s.placed}, {"box", s.box}});
      s.counts = count.output<TileCounts>("counts", i);
      bucket.process({{"vis", s.placed}, {"counts", s.counts}});
      s.buckets = bucket.output<TileBuckets>("buckets", i);
      if (cuda) {
        const std::string at = "block " + std::to_string(i);
        expect_on_device(*s.placed, at + ", uvw.w_sort");
        expect_on_device(*s.box, at + ", uvw.bounding_box");
        expect_on_device(*s.counts, at + ", tiles.count");
        expect_on_device(*s.buckets, at + ", tiles.bucket_sort");
        EXPECT_EQ(s.buckets->vis.coords.data(), s.placed->coords.data()) << at << ": the buckets hold the placed block";
        s = {moved(s.placed, Location::host), moved(s.box, Location::host), moved(s.counts, Location::host),
             moved(s.buckets, Location::host)};
      }
      out.push_back(s);
    }
    return out;
  }

  Blocks upload(const Blocks& blocks) {
    Blocks out;
    for (auto& b : blocks) out.push_back(moved(b, Location::device));
    return out;
  }

};

// The inputs of a test, the same on both backends (the cuda ones on the host still): a mixed block
// (with `skipped` already set, to see it carried), an empty block, a block with nothing on the
// grid, and a small random one.
Blocks inputs(std::mt19937_64& rng, const KernelStack& ks, std::size_t n) {
  const double far = 0.6 * ks.geom.grid_size;
  const std::vector<VisAt> off_grid = {{far, 0, 0}, {0, -far, plane_w(ks, ks.planes - 1, 1)}, {far, far, -1}};
  auto mixed = make_block(ks, mixed_case(rng, ks, n), 0);
  mixed->skipped = 3;
  return {mixed, make_block(ks, {}, 1), make_block(ks, off_grid, 2), make_block(ks, random_vis(rng, ks, 100), 3)};
}

// The cuda block is the cpu block bit for bit: the visibilities on the grid sorted by plane, then
// the ones off it in input order with plane -1 (gridding_test.cpp checks the cpu one), the block's
// size and `skipped` the input's.
void expect_w_sort_matches(const VisBlock& gpu, const VisBlock& cpu, const VisBlock& in, const KernelStack& ks) {
  const std::size_t n = in.size();
  ASSERT_EQ(gpu.size(), n);
  ASSERT_EQ(cpu.size(), n);
  ASSERT_TRUE(gpu.placed());
  EXPECT_EQ(gpu.index, cpu.index);
  EXPECT_EQ(gpu.obs, in.obs);
  EXPECT_EQ(gpu.skipped, in.skipped);
  EXPECT_EQ(cpu.skipped, in.skipped);
  EXPECT_EQ(gpu.grid_size, cpu.grid_size);
  EXPECT_EQ(gpu.max_support, ks.max_support);
  EXPECT_EQ(gpu.max_support, cpu.max_support);
  EXPECT_TRUE(gpu.antenna1.empty() && gpu.antenna2.empty() && gpu.channel.empty() && gpu.time.empty());
  for (std::size_t d = 0; d < n; ++d) {
    ASSERT_TRUE(same_bits(gpu.uu[d], cpu.uu[d])) << d;
    ASSERT_TRUE(same_bits(gpu.vv[d], cpu.vv[d])) << d;
    ASSERT_TRUE(same_bits(gpu.ww[d], cpu.ww[d])) << d;
    ASSERT_TRUE(same_bits(gpu.vis[d], cpu.vis[d])) << d;
    ASSERT_TRUE(same_bits(gpu.weight[d], cpu.weight[d])) << d;
    ASSERT_TRUE(same_bits(gpu.coords[d], cpu.coords[d]))
        << d << ": plane " << gpu.coords[d].plane << " vs " << cpu.coords[d].plane << ", cell (" << gpu.coords[d].u
        << ", " << gpu.coords[d].v << ") vs (" << cpu.coords[d].u << ", " << cpu.coords[d].v << ")";
  }
}

// The cuda layout covers the whole grid with the cpu alignment; the cpu layout (the box's) sits in
// it at whole tiles (du, dv); per tile, the counts and the entries are the cpu's, zero
// outside the cpu layout, and every entry's tile is recorded; the active range is the cpu
// layout's tiles. With `in_order` (order: visibility) each tile's entries are in the cpu's order.
void expect_tiles_match(const Sorted& gpu, const Sorted& cpu, Tiles t, const KernelStack& ks, bool in_order) {
  const TileLayout &g = gpu.counts->layout, &c = cpu.counts->layout;
  const int n = ks.geom.grid_size, centre = ks.geom.centre();
  EXPECT_EQ(gpu.counts->index, cpu.counts->index);
  EXPECT_EQ(gpu.buckets->index, cpu.buckets->index);
  ASSERT_EQ(g.tile_u, t.u);
  ASSERT_EQ(g.tile_v, t.v);
  EXPECT_EQ(((g.origin_u - (centre - t.u / 2)) % t.u + t.u) % t.u, 0);
  EXPECT_EQ(((g.origin_v - (centre - t.v / 2)) % t.v + t.v) % t.v, 0);
  EXPECT_LE(g.origin_u, 0);
  EXPECT_GT(g.origin_u + t.u, 0);
  EXPECT_LE(g.origin_v, 0);
  EXPECT_GT(g.origin_v + t.v, 0);
  EXPECT_GE(g.origin_u + g.ntiles_u * t.u - 1, n - 1);
  EXPECT_LE(g.origin_u + (g.ntiles_u - 1) * t.u, n - 1);
  EXPECT_GE(g.origin_v + g.ntiles_v * t.v - 1, n - 1);
  EXPECT_LE(g.origin_v + (g.ntiles_v - 1) * t.v, n - 1);
  EXPECT_LE(g.origin_u + g.centre_u * t.u, centre);
  EXPECT_GT(g.origin_u + (g.centre_u + 1) * t.u, centre);
  EXPECT_LE(g.origin_v + g.centre_v * t.v, centre);
  EXPECT_GT(g.origin_v + (g.centre_v + 1) * t.v, centre);

  const bool none = c.count() == 0;
  const int du = none ? 0 : (c.origin_u - g.origin_u) / t.u, dv = none ? 0 : (c.origin_v - g.origin_v) / t.v;
  if (!none) {
    ASSERT_EQ(c.origin_u, g.origin_u + du * t.u);
    ASSERT_EQ(c.origin_v, g.origin_v + dv * t.v);
    EXPECT_EQ(c.centre_u, g.centre_u - du);
    EXPECT_EQ(c.centre_v, g.centre_v - dv);
  }
  // Active ranges: the cpu layout is its box, the cuda range is the box's tiles.
  const std::vector<std::int32_t> cpu_active = cpu.counts->active.to_vector();
  const std::vector<std::int32_t> gpu_active = gpu.counts->active.to_vector();
  EXPECT_EQ(cpu_active, (std::vector<std::int32_t>{0, c.ntiles_u - 1, 0, c.ntiles_v - 1}));
  if (none) {
    ASSERT_EQ(gpu_active.size(), 4u);
    EXPECT_GT(gpu_active[0], gpu_active[1]) << "empty";
  } else {
    EXPECT_EQ(gpu_active, (std::vector<std::int32_t>{du, du + c.ntiles_u - 1, dv, dv + c.ntiles_v - 1}));
  }
  EXPECT_EQ(gpu.buckets->active.to_vector(), gpu_active);
  EXPECT_EQ(cpu.buckets->active.to_vector(), cpu_active);

  const TileBuckets &gb = *gpu.buckets, &cb = *cpu.buckets;
  ASSERT_EQ(gpu.counts->counts.size(), std::size_t(g.count()));
  ASSERT_EQ(gb.offsets.size(), std::size_t(g.count()) + 1);
  EXPECT_EQ(gb.offsets[0], 0);
  const std::int64_t total = gb.offsets[g.count()];
  EXPECT_EQ(total, cb.offsets[c.count()]);
  EXPECT_EQ(std::int64_t(gb.entries.size()), std::int64_t(gpu.placed->size()) * max_tiles_met(g, ks.max_support));
  ASSERT_LE(total, std::int64_t(gb.entries.size()));
  ASSERT_EQ(gb.entry_tile.size(), gb.entries.size());
  for (int tv = 0; tv < g.ntiles_v; ++tv)
    for (int tu = 0; tu < g.ntiles_u; ++tu) {
      const std::int64_t tile = std::int64_t(tv) * g.ntiles_u + tu;
      const int cu = tu - du, cv = tv - dv;
      const bool in_cpu = !none && cu >= 0 && cv >= 0 && cu < c.ntiles_u && cv < c.ntiles_v;
      const std::int64_t ct = in_cpu ? std::int64_t(cv) * c.ntiles_u + cu : -1;
      const std::int32_t count = gpu.counts->counts[tile];
      ASSERT_EQ(count, in_cpu ? cpu.counts->counts[ct] : 0) << "tile (" << tu << ", " << tv << ")";
      ASSERT_EQ(gb.offsets[tile + 1] - gb.offsets[tile], std::int64_t(count)) << "tile (" << tu << ", " << tv << ")";
      for (std::int64_t e = gb.offsets[tile]; e < gb.offsets[tile + 1]; ++e)
        ASSERT_EQ(gb.entry_tile[e], tile) << "entry " << e;
      // With order: visibility in the cpu's order too (increasing visibility index).
      std::vector<std::int32_t> list(gb.entries.begin() + gb.offsets[tile], gb.entries.begin() + gb.offsets[tile + 1]);
      if (!in_order) std::sort(list.begin(), list.end());
      if (in_cpu) {
        ASSERT_TRUE(std::equal(list.begin(), list.end(), cb.entries.begin() + cb.offsets[ct],
                               cb.entries.begin() + cb.offsets[ct + 1]))
            << "tile (" << tu << ", " << tv << ")";
      }
    }
}

}  // namespace

TEST_F(GpuSort, WSortMatchesCpu) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (const Shape& sh : kShapes)
      for (const std::string within : {"input", "cell"}) {
        SCOPED_TRACE(sh.str() + ", within_plane " + within);
        auto ks = random_kernel_stack(rng, sh.planes, sh.max_support, sh.oversample, sh.grid_size);
        const Blocks in = inputs(rng, *ks, sh.vis);
        StageHarness cpu(uvw_w_sort::spec(), "cpu", {{"within_plane", within}}),
            gpu(uvw_w_sort::spec(), "cuda", {{"within_plane", within}});
        cpu.set_input("kernels", ks);
        gpu.set_input("kernels", moved(std::shared_ptr<const KernelStack>(ks), Location::device));
        const Blocks on_device = upload(in);
        for (std::size_t b = 0; b < in.size(); ++b) {
          SCOPED_TRACE("block " + std::to_string(b));
          cpu.process({{"vis", in[b]}});
          gpu.process({{"vis", on_device[b]}});
          auto out = gpu.output<VisBlock>("vis", b);
          expect_on_device(*out, "uvw.w_sort");
          expect_w_sort_matches(*moved(out, Location::host), *cpu.output<VisBlock>("vis", b), *in[b], *ks);
          EXPECT_EQ(out->cell_order, within == "cell");
        }
        gpu.finish();  // all finite: no error
        EXPECT_EQ(gpu.work().visibilities, cpu.work().visibilities);
      }
  }
}

TEST_F(GpuSort, BoxCountsAndBucketsMatchCpu) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (const Shape& sh : kShapes) {
      SCOPED_TRACE(sh.str());
      auto ks = random_kernel_stack(rng, sh.planes, sh.max_support, sh.oversample, sh.grid_size);
      const Blocks in = inputs(rng, *ks, sh.vis);
      auto dks = moved(std::shared_ptr<const KernelStack>(ks), Location::device);
      const Blocks on_device = upload(in);
      for (const Tiles& t : sh.tilings) {
        SCOPED_TRACE(t.str());
        const auto cpu = chain("cpu", ks, in, t);
        for (const std::string order : {"any", "visibility"}) {
          const auto gpu = chain("cuda", dks, on_device, t, order);
          for (std::size_t b = 0; b < in.size(); ++b) {
            SCOPED_TRACE("block " + std::to_string(b) + ", order " + order);
            EXPECT_EQ(gpu[b].box->index, cpu[b].box->index);
            EXPECT_EQ(gpu[b].box->range.to_vector(), cpu[b].box->range.to_vector());
            expect_tiles_match(gpu[b], cpu[b], t, *ks, order == "visibility");
          }
        }
        EXPECT_EQ(cpu[1].box->range.to_vector(), (std::vector<std::int32_t>{1, 0, 1, 0})) << "empty block";
        EXPECT_EQ(cpu[2].box->range.to_vector(), (std::vector<std::int32_t>{1, 0, 1, 0})) << "nothing on the grid";
      }
    }
  }
}

// The device chain, downloaded, gridded by the CPU grid.tiled (which skips and counts plane -1),
// against the CPU chain gridded the same way: only the order of additions within a tile differs.
TEST_F(GpuSort, DeviceChainGridsLikeCpuChain) {
  for (auto seed : test::seeds(20240611ULL)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (const Shape& sh : {kShapes[0], kShapes[1], kShapes[4]}) {
      SCOPED_TRACE(sh.str());
      auto ks = random_kernel_stack(rng, sh.planes, sh.max_support, sh.oversample, sh.grid_size);
      const Blocks in = inputs(rng, *ks, sh.vis);
      const Tiles t = sh.tilings.back();
      const auto cpu = chain("cpu", ks, in, t);
      const auto gpu = chain("cuda", moved(std::shared_ptr<const KernelStack>(ks), Location::device), upload(in), t);
      auto grid = [&](const std::vector<Sorted>& sorted) {
        StageHarness h(grid_tiled::spec(), "cpu", {{"central_box", std::int64_t(2)}});
        h.set_input("kernels", ks);
        for (auto& s : sorted) h.process({{"buckets", s.buckets}});
        h.finish();
        return h.output<Grid>("grid");
      };
      const auto g = grid(gpu), ref = grid(cpu);
      EXPECT_LT(relative_frobenius(*g, ref->cells), 1e-5);
      EXPECT_NEAR(g->norm(), ref->norm(), 1e-9 * std::abs(ref->norm()));
      EXPECT_GT(g->gridded(), 0);
      EXPECT_EQ(g->gridded(), ref->gridded());
      EXPECT_GT(g->skipped(), 0);
      EXPECT_EQ(g->skipped(), ref->skipped());
    }
  }
}

// Non-finite uvw is an InputError on both backends. The cpu raises it at the block; the cuda
// backend cannot raise in a kernel or read the block without a wait, so it sorts every block (the
// bad ones off the grid), counts them on the device and raises the error at the end of the stream,
// naming the first one, which the cpu names too.
TEST_F(GpuSort, NonFiniteUvwIsAnInputErrorAtTheEndOfTheStream) {
  std::mt19937_64 rng(7);
  auto ks = random_kernel_stack(rng, 6, 4, 4, 64);
  auto dks = moved(std::shared_ptr<const KernelStack>(ks), Location::device);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto with_bad = [&](std::int64_t index, std::vector<std::pair<std::size_t, VisAt>> bad) {
    auto v = random_vis(rng, *ks, 1000);
    for (auto& [at, x] : bad) v.insert(v.begin() + std::ptrdiff_t(at), x);
    return make_block(*ks, v, index);
  };
  const Blocks blocks = {make_block(*ks, random_vis(rng, *ks, 500), 0),
                         with_bad(1, {{17, {nan, 0, 0}}, {400, {0, 0, -inf}}}),
                         with_bad(2, {{3, {0, inf, 0}}})};
  StageHarness gpu(uvw_w_sort::spec(), "cuda");
  gpu.set_input("kernels", dks);
  for (auto& b : upload(blocks)) gpu.process({{"vis", b}});
  for (std::size_t b = 0; b < blocks.size(); ++b)
    EXPECT_EQ(gpu.output<VisBlock>("vis", b)->size(), blocks[b]->size()) << "every block sorted, bad ones kept";
  try {
    gpu.finish();
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "block 1, visibility 17: uvw is not finite (3 such visibilities in the stream)");
  }
  StageHarness cpu(uvw_w_sort::spec(), "cpu");
  cpu.set_input("kernels", ks);
  cpu.process({{"vis", blocks[0]}});
  try {
    cpu.process({{"vis", blocks[1]}});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("block 1, visibility 17: uvw is not finite", 0), 0u) << e.what();
  }
}

// What the host can check, it checks before enqueueing anything.
TEST_F(GpuSort, MismatchedOrHostInputsAreRejected) {
  std::mt19937_64 rng(3);
  auto ks = random_kernel_stack(rng, 4, 4, 4, 64);
  auto dks = moved(std::shared_ptr<const KernelStack>(ks), Location::device);
  const Blocks blocks =
      upload({make_block(*ks, random_vis(rng, *ks, 500), 0), make_block(*ks, random_vis(rng, *ks, 500), 1)});
  const auto a = chain("cuda", dks, {blocks[0]}, {16, 16});
  const auto b = chain("cuda", dks, {blocks[1]}, {16, 16});
  // chain() downloads; the stages need device inputs.
  auto placed = moved(a[0].placed, Location::device);
  StageHarness count(tiles_count::spec(), "cuda", {{"tile_u", std::int64_t(16)}, {"tile_v", std::int64_t(16)}});
  EXPECT_THROW(count.process({{"vis", placed}, {"box", moved(b[0].box, Location::device)}}), InputError);
  StageHarness bucket(tiles_bucket_sort::spec(), "cuda");
  EXPECT_THROW(bucket.process({{"vis", placed}, {"counts", moved(b[0].counts, Location::device)}}), InputError);
  StageHarness box(uvw_bounding_box::spec(), "cuda");
  EXPECT_THROW(box.process({{"vis", blocks[0]}}), InputError);  // not placed
  EXPECT_THROW(box.process({{"vis", a[0].placed}}), std::logic_error);  // on the host
  StageHarness sort(uvw_w_sort::spec(), "cuda");
  sort.set_input("kernels", dks);
  EXPECT_THROW(sort.process({{"vis", make_block(*ks, random_vis(rng, *ks, 10))}}), std::logic_error);  // on the host
}
