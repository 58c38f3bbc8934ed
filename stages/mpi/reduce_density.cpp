#include "stages/mpi/reduce_density.hpp"

#include "runtime/dist.hpp"
#include "stages/shared/weighting.hpp"

namespace uvflow::mpi_reduce_density {
namespace {

class ReduceDensity final : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned(density_out.name); }

  void process(Context& ctx) override {
    auto in = ctx.in(density_in);
    auto out = std::make_shared<WeightDensity>(*in);  // shares the arrays: the sum replaces them
    if (dist::size() > 1) {
      weighting::check_density(*in, Location::host);
      out->cells = Array<double>::host(in->cells.size(), pinned_);
      out->totals = Array<double>::host(2);
      dist::all_reduce(in->cells.data(), out->cells.data(), in->cells.size(), dist::Op::sum,
                       std::size_t(params().chunk_mb) << 20);
      dist::all_reduce(in->totals.data(), out->totals.data(), 1, dist::Op::sum);
      out->totals[1] = weighting::sum_of_squares(*out);
    }
    ctx.emit(density_out, out);
  }

 private:
  bool pinned_ = false;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<ReduceDensity>()}); }

}  // namespace uvflow::mpi_reduce_density
