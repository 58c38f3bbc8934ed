#include "stages/uvw/weighting.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "stages/shared/weighting.hpp"

namespace uvflow {

weighting::Settings weighting::Settings::of(const uvw_weighting::Params& p) {
  Settings s;
  const std::string& m = p.mode;
  s.mode = m == "natural" ? Mode::natural : m == "uniform" ? Mode::uniform : Mode::briggs;
  s.robust = p.robust;
  s.rank_filter = p.rank_filter;
  s.rank_filter_size = int(p.rank_filter_size);
  if (s.mode != Mode::briggs && s.robust != 0)
    throw ParamError("robust", "robust is used by mode briggs only; mode is " + m);
  if (s.rank_filter != 0 && s.rank_filter < 1)
    throw ParamError("rank_filter", "rank_filter must be 0 (off) or at least 1 (WSClean ignores smaller levels)");
  return s;
}

std::shared_ptr<const WeightDensity> weighting::density_input(const Context& ctx, const VisBlock& vis, Location where) {
  if (!ctx.connected(uvw_weighting::density))
    throw std::runtime_error("uniform and briggs weighting need input 'density' (a uvw.weight_density stage over "
                             "the same visibilities)");
  auto d = ctx.in(uvw_weighting::density);
  check_density(*d, where);
  check_same_data(vis, *d);
  return d;
}

}  // namespace uvflow

namespace uvflow::uvw_weighting {
namespace {

class WeightingCpu final : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { s_ = weighting::Settings::of(p); }
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned(vis_out.name); }

  void process(Context& ctx) override {
    auto vis = ctx.in(vis_in);
    weighting::check_block(*vis, Location::host);
    auto out = std::make_shared<VisBlock>(*vis);
    if (s_.mode != weighting::Mode::natural) {
      auto d = weighting::density_input(ctx, *vis, Location::host);
      if (cell_weights_.empty()) make_cell_weights(*d);
      const WeightGridGeometry g = d->geom;
      const float *uu = vis->uu.data(), *vv = vis->vv.data(), *w = vis->weight.data();
      const double* cw = cell_weights_.data();
      out->weight = Array<float>::host(vis->size(), pinned_);
      float* ow = out->weight.data();
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, vis->size(), 8192), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) ow[i] = weighting::imaging_weight(w[i], weight_cell(g, uu[i], vv[i]), cw);
      });
    }
    ctx.add_work({.visibilities = double(vis->size())});
    ctx.emit(vis_out, out);
  }

 private:
  // The weight of every cell, once per run: WSClean's FinishGridding, then its rank filter.
  void make_cell_weights(const WeightDensity& d) {
    const int width = d.geom.width, rows = width / 2;
    const double f2 = weighting::briggs_f2(s_.robust, d.totals[0], d.totals[1]);
    const double* density = d.cells.data();
    std::vector<double> cells(std::size_t(d.geom.cells()));
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, cells.size(), 1 << 14), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t k = r.begin(); k != r.end(); ++k) cells[k] = weighting::cell_weight(s_.mode, density[k], f2);
    });
    if (s_.rank_filter == 0) {
      cell_weights_ = std::move(cells);
      return;
    }
    std::vector<double> row_sum(cells.size()), row_count(cells.size());
    cell_weights_.resize(cells.size());
    const int size = s_.rank_filter_size;
    tbb::parallel_for(0, rows, [&](int y) {
      for (int x = 0; x < width; ++x) {
        const std::size_t k = std::size_t(y) * width + x;
        weighting::row_window(cells.data(), width, x, y, size, row_sum[k], row_count[k]);
      }
    });
    tbb::parallel_for(0, rows, [&](int y) {
      for (int x = 0; x < width; ++x)
        cell_weights_[std::size_t(y) * width + x] = weighting::rank_filtered(
            cells.data(), row_sum.data(), row_count.data(), width, rows, x, y, s_.rank_filter, size);
    });
  }

  weighting::Settings s_;
  bool pinned_ = false;
  std::vector<double> cell_weights_;  // empty until the first block under uniform or briggs
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WeightingCpu>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::uvw_weighting
