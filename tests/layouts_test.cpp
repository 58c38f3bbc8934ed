// Derived kernel layouts against the compacted quarter kernels they are built from: the rows
// layout (cpu tiled gridder), OERC and NAG (cuda tiled gridders) and the residue order (the uvflow
// walkers), for random stacks and every (plane, off_u, iy, k) a gridder reads; and a stack made
// from external kernels through the public builder (runtime/payloads/kernel_stack_builder.hpp)
// against kernels.wproj's own.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#include "runtime/harness.hpp"
#include "runtime/payloads/kernel_stack_builder.hpp"
#include "stages/kernels/wproj.hpp"
#include "tests/support/grid_cases.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/wproj_stack.hpp"

using namespace uvflow;

TEST(KernelLayouts, EveryLayoutHoldsTheQuarterValueAGridderAsksFor) {
  for (std::uint64_t seed : {std::uint64_t(5), test::fresh_seed()}) {
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

// The uvflow walkers' residue order (locality::ResidueTable, made on the device from the quarter):
// each row a permutation of the quarter's row, and every footprint row of every sub-cell offset two
// unit-stride runs whose columns hold the value a gridder asks for, also for oversamplings that
// are not powers of two.
TEST(KernelLayouts, ResidueOrderHoldsEveryFootprintRowAsTwoRuns) {
  for (std::uint64_t seed : {std::uint64_t(6), test::fresh_seed()}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (int o : {2, 4, 6, 8, 10, 16}) {
      auto ks = test::random_kernel_stack(rng, 7, 9, o, 64);
      for (int p = 0; p < ks->planes; ++p) {
        const int s = ks->support[p], S = ks->half_size(p);
        const cfloat* q = ks->quarter.data() + ks->quarter_start[p];
        for (int iy = 0; iy < S; ++iy) {
          std::vector<cfloat> row(S);
          std::set<int> columns;
          for (int ix = 0; ix < S; ++ix) {
            const int c = residue_column(ix, o, S);
            ASSERT_GE(c, 0);
            ASSERT_LT(c, S);
            columns.insert(c);
            row[c] = q[std::int64_t(iy) * S + ix];
          }
          ASSERT_EQ(int(columns.size()), S) << "o " << o << " S " << S;
          for (int ou = -o / 2; ou <= o / 2; ++ou) {
            const ResidueRun run = residue_run(s, o, ou);
            for (int j = 0; j <= 2 * s; ++j) {
              const int ix = std::abs(ou + (j - s) * o), c = residue_run_column(run, j);
              ASSERT_EQ(c, residue_column(ix, o, S)) << "o " << o << " s " << s << " off_u " << ou << " j " << j;
              ASSERT_EQ(row[c], q[std::int64_t(iy) * S + ix]);
              if (j > 0 && (j - 1 >= run.split) == (j >= run.split)) {  // within one run
                EXPECT_EQ(std::abs(c - residue_run_column(run, j - 1)), 1) << "o " << o << " off_u " << ou << " j " << j;
              }
            }
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

namespace {

template <class T>
void expect_same(const Array<T>& a, const Array<T>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << what;
}

}  // namespace

// A plugin's way in: kernels.wproj's quarter kernels, handed over plane by plane as external
// kernels, make exactly kernels.wproj's stack (every layout); scaled by 3 and normalised, the same
// up to float rounding; and sizes that do not fit are refused.
TEST(KernelStackBuilder, ExternalKernelsMakeKernelsWprojsStack) {
  StageHarness h(kernels_wproj::spec(), "cpu",
                 {{"image_size", std::int64_t(64)}, {"cell_arcsec", 60.0}, {"layouts", std::string("all")},
                  {"cache_dir", std::string()}});
  h.set_input("info", test::w_stats_info(3000, 10, 1500));
  h.process();
  auto ref = h.output<KernelStack>("kernels");
  ASSERT_GT(ref->planes, 2);
  QuarterKernels k{.geom = ref->geom, .oversample = ref->oversample, .w_scale = ref->w_scale, .max_w = ref->max_w,
                   .conv_size = ref->conv_size, .normalise = false};
  for (int p = 0; p < ref->planes; ++p) {
    const std::int64_t S = ref->half_size(p);
    const cfloat* q = ref->quarter.data() + ref->quarter_start[p];
    k.support.push_back(ref->support[p]);
    k.quarter.emplace_back(q, q + S * S);
  }
  auto ks = make_kernel_stack(k, {.rows = true, .gpu = true});
  EXPECT_EQ(ks->geom, ref->geom);
  EXPECT_EQ(ks->oversample, ref->oversample);
  EXPECT_EQ(ks->planes, ref->planes);
  EXPECT_EQ(ks->w_scale, ref->w_scale);
  EXPECT_EQ(ks->max_support, ref->max_support);
  expect_same(ks->support, ref->support, "support");
  expect_same(ks->quarter_start, ref->quarter_start, "quarter_start");
  expect_same(ks->quarter, ref->quarter, "quarter");
  expect_same(ks->rows_start, ref->rows_start, "rows_start");
  expect_same(ks->rows, ref->rows, "rows");
  expect_same(ks->footprint_sum, ref->footprint_sum, "footprint_sum");
  expect_same(ks->oerc_start, ref->oerc_start, "oerc_start");
  expect_same(ks->oerc, ref->oerc, "oerc");
  expect_same(ks->nag, ref->nag, "nag");

  for (auto& plane : k.quarter)
    for (auto& v : plane) v *= 3.0f;
  k.normalise = true;
  auto scaled = make_kernel_stack(k, {.rows = false});
  EXPECT_TRUE(scaled->rows.empty());
  ASSERT_EQ(scaled->quarter.size(), ref->quarter.size());
  const float peak = std::abs(ref->quarter[0]);
  for (std::size_t i = 0; i < ref->quarter.size(); ++i)
    ASSERT_LE(std::abs(scaled->quarter[i] - ref->quarter[i]), 1e-6f * peak) << i;

  auto wrong = k;
  wrong.quarter[1].pop_back();
  EXPECT_THROW(make_kernel_stack(wrong), std::invalid_argument);
  wrong = k;
  wrong.support.pop_back();
  EXPECT_THROW(make_kernel_stack(wrong), std::invalid_argument);
  wrong = k;
  wrong.oversample = 3;
  EXPECT_THROW(make_kernel_stack(wrong), std::invalid_argument);
}
