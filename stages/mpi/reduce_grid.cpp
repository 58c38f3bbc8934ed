#include "stages/mpi/reduce_grid.hpp"

#include <spdlog/spdlog.h>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <vector>

#include "runtime/dist.hpp"
#include "runtime/error.hpp"

namespace uvflow::mpi_reduce_grid {
namespace {

// The rectangle of the non-zero cells of an n x n grid of complex cells (pairs of T).
template <class T>
Rectangle nonzero_rectangle(const T* cells, int n) {
  return tbb::parallel_reduce(
      tbb::blocked_range<int>(0, n), Rectangle{n, n, -1, -1},
      [&](const tbb::blocked_range<int>& rows, Rectangle r) {
        for (int v = rows.begin(); v < rows.end(); ++v) {
          const T* row = cells + 2 * std::int64_t(v) * n;
          for (int u = 0; u < n; ++u)
            if (row[2 * u] != 0 || row[2 * u + 1] != 0)
              r = {std::min<std::int64_t>(r.u0, u), std::min<std::int64_t>(r.v0, v), std::max<std::int64_t>(r.u1, u),
                   std::max<std::int64_t>(r.v1, v)};
        }
        return r;
      },
      [](const Rectangle& a, const Rectangle& b) {
        return Rectangle{std::min(a.u0, b.u0), std::min(a.v0, b.v0), std::max(a.u1, b.u1), std::max(a.v1, b.v1)};
      });
}

// The sum over the ranks of the rectangle `r` of `in` (n x n complex cells, pairs of T; null: a
// zero grid), rows packed chunk_bytes at a time, into `out` on rank 0 (null elsewhere), rounded to
// float once; the rest of `out` is zeroed.
template <class T>
void sum_to_root(const T* in, float* out, int n, Rectangle r, std::size_t chunk_bytes) {
  if (out)
    tbb::parallel_for(tbb::blocked_range<int>(0, n), [&](const tbb::blocked_range<int>& rows) {
      for (int v = rows.begin(); v < rows.end(); ++v) {
        float* row = out + 2 * std::int64_t(v) * n;
        if (r.empty() || v < r.v0 || v > r.v1) {
          std::fill(row, row + 2 * std::int64_t(n), 0.0f);
        } else {
          std::fill(row, row + 2 * r.u0, 0.0f);
          std::fill(row + 2 * (r.u1 + 1), row + 2 * std::int64_t(n), 0.0f);
        }
      }
    });
  if (r.empty()) return;
  const std::size_t row_values = 2 * std::size_t(r.u1 - r.u0 + 1);
  const auto step = std::int64_t(std::clamp<std::size_t>(chunk_bytes / (row_values * sizeof(T)), 1, std::size_t(r.v1 - r.v0 + 1)));
  std::vector<T> pack(std::size_t(step) * row_values), sum(out ? pack.size() : 0);
  for (std::int64_t v = r.v0; v <= r.v1; v += step) {
    const std::int64_t rows = std::min(step, r.v1 + 1 - v);
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto at = pack.begin() + std::ptrdiff_t(i * row_values);
      if (!in) std::fill(at, at + std::ptrdiff_t(row_values), T(0));
      else std::copy(in + 2 * ((v + i) * n + r.u0), in + 2 * ((v + i) * n + r.u0) + row_values, at);
    }
    dist::reduce_to_root(pack.data(), out ? sum.data() : nullptr, std::size_t(rows) * row_values, chunk_bytes);
    if (out)
      for (std::int64_t i = 0; i < rows; ++i)
        std::transform(sum.begin() + std::ptrdiff_t(i * row_values), sum.begin() + std::ptrdiff_t((i + 1) * row_values),
                       out + 2 * ((v + i) * n + r.u0), [](T x) { return float(x); });
  }
}

class ReduceGrid final : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned(grid_out.name); }

  void process(Context& ctx) override {
    auto in = ctx.in(grid_in);
    auto out = std::make_shared<Grid>(*in);  // shares the arrays: the sum replaces them on rank 0
    if (dist::size() > 1) {
      const bool root = dist::root();
      if (root) {
        out->cells = Array<cfloat>::host(in->cells.size(), pinned_);
        out->totals = Array<double>::host(in->totals.size());
      }
      // A complex sum is the sum of the real and of the imaginary parts.
      const int n = int(in->geom.grid_size);
      const std::size_t chunk = std::size_t(params().chunk_mb) << 20;
      float* sum = root ? reinterpret_cast<float*>(out->cells.data()) : nullptr;
      const auto* cells64 = in->cells64.size() == in->cells.size() ? reinterpret_cast<const double*>(in->cells64.data()) : nullptr;
      const auto* cells = reinterpret_cast<const float*>(in->cells.data());
      const SumPlan plan = plan_sum(cells64, cells64 ? nonzero_rectangle(cells64, n) : nonzero_rectangle(cells, n), n,
                                    ctx.stage_id());
      if (plan.exact) sum_to_root(cells64, sum, n, plan.cells, chunk);
      else sum_to_root(cells, sum, n, plan.cells, chunk);
      out->cells64 = {};
      dist::reduce_to_root(in->totals.data(), root ? out->totals.data() : nullptr, in->totals.size());
      if (root) check_counted_once(out->totals.data(), out->obs.get());
    }
    ctx.emit(grid_out, out);
  }

 private:
  bool pinned_ = false;
};

}  // namespace

void check_counted_once(const double* totals, const Observation* obs) {
  if (!obs || obs->total_visibilities <= 0) return;
  const double counted = totals[1] + totals[2], total = double(obs->total_visibilities);
  if (counted > total)
    throw InputError("the " + std::to_string(dist::size()) + " ranks gridded " + std::to_string(std::int64_t(counted)) +
                     " visibilities of a set of " + std::to_string(obs->total_visibilities) +
                     ": every source that feeds the gridder needs share: rows (with share: none every rank reads "
                     "them all)");
}

SumPlan plan_sum(bool has_double_cells, Rectangle mine, int n, const std::string& stage) {
  std::int64_t exact = has_double_cells || mine.empty();
  dist::all_reduce(&exact, &exact, 1, dist::Op::min);
  std::int64_t lo[2] = {mine.u0, mine.v0}, hi[2] = {mine.u1, mine.v1};
  dist::all_reduce(lo, lo, 2, dist::Op::min);
  dist::all_reduce(hi, hi, 2, dist::Op::max);
  const Rectangle r{lo[0], lo[1], hi[0], hi[1]};
  if (dist::root()) {
    if (r.empty()) spdlog::info("{}: every rank's grid is zero", stage);
    else
      spdlog::info("{}: {} ranks' {} grids summed over columns {}..{}, rows {}..{} ({:.1f} % of the {}^2 cells)", stage,
                   dist::size(), exact ? "double" : "float", r.u0, r.u1, r.v0, r.v1,
                   100.0 * double(r.u1 - r.u0 + 1) * double(r.v1 - r.v0 + 1) / (double(n) * n), n);
  }
  return {exact != 0, r};
}

StageSpec spec() { return decl.spec({cpu_backend<ReduceGrid>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::mpi_reduce_grid
