// The uvflow walkers' locality key (stages/shared/locality_key.hpp) on the host: its fields fit 64
// bits for any grid, plane count and block size, coarsening the cells only as far as needed; the
// plane and the entry's index come back out of a key; and keys sort as the walkers need (off the
// grid first, then the planes widest first, then the Morton index of the cell, then the index),
// against a Morton index made bit by bit here, for fixed and fresh random entries.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "stages/shared/locality_key.hpp"
#include "tests/support/seeds.hpp"

using namespace uvflow::locality;

namespace {

int bits_for(std::int64_t count) { return count <= 1 ? 1 : int(std::bit_width(std::uint64_t(count - 1))); }

std::uint64_t morton_reference(std::uint32_t u, std::uint32_t v) {
  std::uint64_t m = 0;
  for (int b = 0; b < 32; ++b) m |= std::uint64_t(u >> b & 1) << (2 * b) | std::uint64_t(v >> b & 1) << (2 * b + 1);
  return m;
}

struct Shape {
  std::int64_t grid_size;
  int planes;
  std::int64_t n;
};

const Shape kShapes[] = {{1, 1, 1},
                         {2, 1, 2},
                         {64, 3, 100},
                         {18000, 654, 7848960},
                         {18750, 1045, 31395840},
                         {32768, 4096, 1 << 22},
                         {65536, 4096, 2147483647},
                         {1 << 20, 1 << 20, 2147483647}};

std::string name(const Shape& s) {
  return "grid " + std::to_string(s.grid_size) + ", planes " + std::to_string(s.planes) + ", n " + std::to_string(s.n);
}

}  // namespace

TEST(LocalityKey, FieldsFitSixtyFourBitsAndCoarsenOnlyAsFarAsNeeded) {
  const std::uint64_t seed = uvflow::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  for (int r = 0; r < 200; ++r)
    shapes.push_back(
        {std::int64_t(rng() % (1 << 20)) + 1, int(rng() % (1 << 16)) + 1, std::int64_t(rng() % 2147483647) + 1});
  for (const Shape& s : shapes) {
    SCOPED_TRACE(name(s));
    const KeyLayout k = key_layout(s.grid_size, s.planes, s.n);
    const int cell_bits = bits_for(s.grid_size), plane_bits = int(std::bit_width(unsigned(s.planes)));
    EXPECT_EQ(k.index_bits, bits_for(s.n));
    EXPECT_EQ(k.plane_shift, k.index_bits + 2 * (cell_bits - k.coarse));
    EXPECT_LE(k.end_bit(), 64);
    EXPECT_EQ(k.end_bit(), k.plane_shift + plane_bits);
    if (k.coarse > 0) {
      EXPECT_GT(plane_bits + 2 * (cell_bits - k.coarse + 1) + k.index_bits, 64);
    }
    EXPECT_GE(k.coarse, 0);
    EXPECT_LE(k.coarse, cell_bits);
  }
  // The el56-82 preset's blocks: nothing coarsened, 40 bits sorted.
  const KeyLayout el = key_layout(18000, 654, 7848960);
  EXPECT_EQ(el.coarse, 0);
  EXPECT_EQ(el.end_bit() - el.index_bits, 40);
  // A grid of 65536 cells, 4096 planes and 2^31 - 1 entries: 76 bits, so 6 bits of u and v go.
  EXPECT_EQ(key_layout(65536, 4096, 2147483647).coarse, 6);
}

TEST(LocalityKey, PlaneAndIndexComeBackAndKeysSortAsTheWalkersNeed) {
  for (std::uint64_t seed : {std::uint64_t(3), uvflow::test::fresh_seed()}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(name(s));
      const KeyLayout k = key_layout(s.grid_size, s.planes, s.n);
      struct Entry {
        int plane, u, v;
        std::int64_t i;
        std::uint64_t key;
      };
      const auto entry = [&] {
        Entry e{int(rng() % (s.planes + 1)) - 1, int(rng() % s.grid_size), int(rng() % s.grid_size),
                std::int64_t(rng() % s.n), 0};
        e.key = locality_key(k, e.plane, e.u, e.v, e.i);
        return e;
      };
      for (int t = 0; t < 2000; ++t) {
        const Entry a = entry(), b = entry();
        ASSERT_EQ(key_plane(k, a.key), a.plane);
        ASSERT_EQ(key_index(a.key, k.index_mask()), a.i);
        if (k.end_bit() < 64) {
          ASSERT_EQ(a.key >> k.end_bit(), 0u);  // nothing above the plane field
        }
        // The order the sort makes of the bits above the index: off the grid, then planes widest
        // (highest) first, then Morton cells (of u and v coarsened), then index order.
        const auto rank = [&](const Entry& e) {
          return e.plane < 0 ? std::uint64_t(0) : std::uint64_t(s.planes - e.plane);
        };
        const std::uint64_t ma = morton_reference(std::uint32_t(a.u) >> k.coarse, std::uint32_t(a.v) >> k.coarse),
                            mb = morton_reference(std::uint32_t(b.u) >> k.coarse, std::uint32_t(b.v) >> k.coarse);
        bool before;
        if (rank(a) != rank(b)) before = rank(a) < rank(b);
        else if (a.plane >= 0 && ma != mb) before = ma < mb;
        else before = a.i < b.i;
        if (a.key != b.key) {
          ASSERT_EQ(a.key < b.key, before) << "planes " << a.plane << ", " << b.plane;
        }
      }
    }
  }
}
