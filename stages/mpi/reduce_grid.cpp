#include "stages/mpi/reduce_grid.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "runtime/dist.hpp"
#include "runtime/error.hpp"

namespace uvflow::mpi_reduce_grid {
namespace {

// The sum over the ranks of `n` doubles of `in`, chunk by chunk, rounded to float once into `out`
// on rank 0 (null elsewhere).
void sum_to_root(const double* in, float* out, std::size_t n, std::size_t chunk_bytes) {
  const std::size_t step = std::max<std::size_t>(1, chunk_bytes / sizeof(double));
  std::vector<double> sum(out ? std::min(step, n) : 0);
  for (std::size_t i = 0; i < n; i += step) {
    const std::size_t m = std::min(step, n - i);
    dist::reduce_to_root(in + i, out ? sum.data() : nullptr, m, chunk_bytes);
    if (out) std::copy(sum.begin(), sum.begin() + std::ptrdiff_t(m), out + i);
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
      // A complex sum is the sum of the real and of the imaginary parts: 2n values. The double
      // cells of every rank (grid.tiled's cpu backend) when all have them, else the float cells.
      const std::size_t n = 2 * in->cells.size(), chunk = std::size_t(params().chunk_mb) << 20;
      float* sum = root ? reinterpret_cast<float*>(out->cells.data()) : nullptr;
      std::int64_t exact = in->cells64.size() == in->cells.size();
      dist::all_reduce(&exact, &exact, 1, dist::Op::min);
      if (exact) sum_to_root(reinterpret_cast<const double*>(in->cells64.data()), sum, n, chunk);
      else dist::reduce_to_root(reinterpret_cast<const float*>(in->cells.data()), sum, n, chunk);
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

void log_rectangle(const std::string& stage, std::int64_t u0, std::int64_t v0, std::int64_t u1, std::int64_t v1, int n) {
  spdlog::info("{}: {} ranks' grids summed over columns {}..{}, rows {}..{} ({:.1f} % of the {}^2 cells)", stage,
               dist::size(), u0, u1, v0, v1, 100.0 * double(u1 - u0 + 1) * double(v1 - v0 + 1) / (double(n) * n), n);
}

StageSpec spec() { return decl.spec({cpu_backend<ReduceGrid>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::mpi_reduce_grid
