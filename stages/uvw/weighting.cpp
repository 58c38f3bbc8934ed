#include "stages/uvw/weighting.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "stages/uvw/weight_density.hpp"

namespace uvflow {

weighting::Settings weighting::Settings::of(const Params& p) {
  Settings s;
  const std::string& m = p.string("mode");
  s.mode = m == "natural" ? Mode::natural : m == "uniform" ? Mode::uniform : Mode::briggs;
  s.robust = p.number("robust");
  s.rank_filter = p.number("rank_filter");
  s.rank_filter_size = int(p.integer("rank_filter_size"));
  if (s.mode != Mode::briggs && s.robust != 0)
    throw ParamError("robust", "robust is used by mode briggs only; mode is " + m);
  if (s.rank_filter != 0 && s.rank_filter < 1)
    throw ParamError("rank_filter", "rank_filter must be 0 (off) or at least 1 (WSClean ignores smaller levels)");
  return s;
}

std::shared_ptr<const WeightDensity> weighting::density_input(const Context& ctx, const VisBlock& vis, Location where) {
  if (!ctx.connected("density"))
    throw std::runtime_error("uniform and briggs weighting need input 'density' (a uvw.weight_density stage over "
                             "the same visibilities)");
  auto d = ctx.in<WeightDensity>("density");
  check_density(*d, where);
  check_same_data(vis, *d);
  return d;
}

namespace {

class WeightingCpu final : public Stage {
 public:
  void configure(const Params& p) override { s_ = weighting::Settings::of(p); }
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned("vis"); }

  void process(Context& ctx) override {
    auto vis = ctx.in<VisBlock>("vis");
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
    ctx.emit("vis", out);
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

StageSpec uvw_weighting_spec() {
  StageSpec s;
  s.type = "uvw.weighting";
  s.summary = "imaging weights as WSClean makes them: natural, uniform or Briggs (robust R), with its rank filter";
  s.doc =
      "Multiplies each visibility's weight w_i by the weight of its cell of WSClean's weighting grid, computed once "
      "from the summed weights W_k of uvw.weight_density run over the same visibilities, with WSClean 3.1's "
      "definitions (structures/imageweights.cpp FinishGridding and RankFilter, io/imageweightcache.h; tested "
      "visibility by visibility against the imaging weights WSClean 3.1 stores with -store-imaging-weights). "
      "uniform: cell weight 1 / W_k (0 in empty cells). briggs: 1 / (1 + f^2 W_k) with "
      "f^2 = (5 * 10^-R)^2 / (sum_k W_k^2 / sum_i w_i), the sums over the grid, in every cell (empty ones get 1, as "
      "in WSClean 3.1; later WSClean versions leave them 0, which changes the rank filter's means near the edge of "
      "the uv coverage): R -> -inf tends to uniform (up to a constant factor), R -> +inf to natural. Then WSClean's "
      "weighting rank filter, on by default as in WSClean: a nonzero cell weight larger than rank_filter times the "
      "mean of the nonzero cell weights in its window (columns x - d to x + d - 1, rows y - d to y + d - 1, clipped "
      "to the grid, d = rank_filter_size / 2) is set to that bound. A visibility outside the weighting grid, or "
      "with a non-finite uv, gets weight 0. natural: weights unchanged, no density needed (WSClean multiplies by 1 "
      "in every occupied cell and zeroes visibilities outside its weighting grid, which lie outside every uvflow "
      "imaging grid too). The dirty image downstream is normalised by the weights it gridded, so a point source "
      "keeps its flux whatever the weighting. In a pipeline the visibilities are read twice: a first reader feeds "
      "uvw.weight_density, a second one (the same parameters) this stage, whose blocks wait for the density "
      "(bounded by run.max_in_flight; pipelines/ms_dirty_image.yaml shows it). With mode natural the density may be "
      "left unconnected; if it is connected it is waited for and ignored. Under uniform and briggs each block must "
      "come from the visibility set the density was made from (the same origin and visibility count), so two "
      "readers given different files stop the run instead of weighting one file by the other. "
      "cpu: oneTBB over cells and visibilities. cuda: the cell weights and the rank filter computed on the device "
      "(one thread per cell), then one thread per visibility; nothing synchronises with the host. Tested against an "
      "independent double-precision implementation of the definitions (every occupied cell's uniform weights sum "
      "to 1 without the rank filter; Briggs at R = -5 and +5 against uniform and natural), cuda against cpu, and "
      "end to end against WSClean's dirty images (tests/wsclean_test).";
  s.inputs = {
      {"vis", kVisBlock, Arity::stream, Residency::backend, "visibilities: uu, vv in wavelengths, visibility weights"},
      {"density", kWeightDensity, Arity::once, Residency::backend,
       "uvw.weight_density over the same visibilities; needed by uniform and briggs, ignored by natural", true},
  };
  s.outputs = {{"vis", kVisBlock, Arity::stream, Residency::backend,
                "the same visibilities with their imaging weights (other arrays shared, not copied)"}};
  s.params = {
      {"mode", ParamType::choice, std::string("uniform"), false, "", {}, {}, {"natural", "uniform", "briggs"}, {},
       "natural: weights unchanged; uniform: divided by the summed weight of their cell; briggs: robust R "
       "(WSClean's -weight; its default is uniform)"},
      {"robust", ParamType::number, 0.0, false, "", -10.0, 10.0, {}, {},
       "Briggs' robustness R (mode briggs only): -2 is close to uniform, 2 close to natural (WSClean's "
       "-weight briggs R)"},
      {"rank_filter", ParamType::number, 3.0, false, "", 0.0, 1e6, {}, {},
       "WSClean's -weighting-rank-filter (its default, 3): cell weights above this many times their window's mean "
       "are clipped to it; 0 turns the filter off (uniform and briggs)"},
      {"rank_filter_size", ParamType::integer, std::int64_t(16), false, "cells", 2.0, 4096.0, {}, {},
       "WSClean's -weighting-rank-filter-size: the window side of the rank filter"},
  };
  s.backends = {{"cpu", [] { return std::make_unique<WeightingCpu>(); }}};
  s.backends.push_back(UVFLOW_CUDA_BACKEND(make_weighting_cuda));
  s.concurrency = Concurrency::serial;
  return s;
}

}  // namespace uvflow
