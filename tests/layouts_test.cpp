// Derived kernel layouts against the compacted quarter kernels they are built from: the rows
// layout (cpu tiled gridder), OERC and NAG (cuda tiled gridders), for random stacks and every
// (plane, off_u, iy, k) a gridder reads.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "stages/shared/layouts.hpp"
#include "tests/support/grid_cases.hpp"

using namespace uvflow;

TEST(KernelLayouts, EveryLayoutHoldsTheQuarterValueAGridderAsksFor) {
  for (std::uint64_t seed : {std::uint64_t(5), std::uint64_t(std::random_device{}())}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (int o : {2, 4, 8}) {
      auto ks = test::random_kernel_stack(rng, 7, 9, o, 64);
      build_kernel_layouts(*ks, {.rows = true, .gpu = true});
      for (int p = 0; p < ks->planes; ++p) {
        const int s = ks->support[p], S = ks->half_size(p), L = 2 * s + 1;
        const cfloat* q = ks->quarter.data() + ks->quarter_start[p];
        const std::int64_t oerc_size = (p + 1 < ks->planes ? ks->oerc_start[p + 1] : std::int64_t(ks->oerc.size())) - ks->oerc_start[p];
        EXPECT_EQ(oerc_size, std::int64_t(o / 2 + 1) * S * L);
        for (int ou = -o / 2; ou <= o / 2; ++ou)
          for (int iy = 0; iy < S; ++iy) {
            std::set<int> nag_columns;
            for (int k = -s; k <= s; ++k) {
              const cfloat want = q[std::int64_t(iy) * S + std::abs(ou + k * o)];
              ASSERT_EQ(ks->rows[ks->rows_start[p] + (std::int64_t(ou + o / 2) * S + iy) * L + k + s], want);
              const long long e = oerc_offset(s, o, ou, iy, k);
              ASSERT_GE(e, 0);
              ASSERT_LT(e, oerc_size);
              ASSERT_EQ(ks->oerc[ks->oerc_start[p] + e], want) << p << " " << ou << " " << iy << " " << k;
              const int c = nag_column(s, o, ou, k);
              ASSERT_GE(c, 0);
              ASSERT_LT(c, S);
              ASSERT_EQ(ks->nag[ks->quarter_start[p] + std::int64_t(iy) * S + c], want) << p << " " << ou << " " << iy << " " << k;
              nag_columns.insert(c);
            }
            // Unit stride along u where no values repeat (0 < |off_u| < o/2): a warp's reads coalesce.
            if (std::abs(ou) != 0 && 2 * std::abs(ou) != o) {
              EXPECT_EQ(int(nag_columns.size()), L);
              for (int k = -s; k < s; ++k) EXPECT_EQ(std::abs(nag_column(s, o, ou, k + 1) - nag_column(s, o, ou, k)), 1);
            }
          }
      }
    }
  }
}

TEST(KernelLayouts, OnlyTheRequestedLayoutsAreBuilt) {
  std::mt19937_64 rng(1);
  auto ks = test::random_kernel_stack(rng, 3, 4, 4, 32);
  build_kernel_layouts(*ks, {.rows = false, .gpu = false});
  EXPECT_TRUE(ks->rows.empty());
  EXPECT_TRUE(ks->oerc.empty());
  EXPECT_TRUE(ks->nag.empty());
  EXPECT_EQ(ks->footprint_sum.size(), std::size_t(3 * 5 * 5));
}
