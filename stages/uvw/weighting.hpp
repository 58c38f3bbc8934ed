// As WSClean 3.1 (structures/imageweights.cpp: FinishGridding, RankFilter, windowMean;
// io/imageweightcache.h; the imaging weight multiplies the visibility weight), from the summed
// weight W_k of each cell k of the weighting grid (runtime/payloads/weights.hpp):
//   cell weight  uniform: 1 / W_k (0 where W_k = 0); briggs: 1 / (1 + f^2 W_k) in every cell, also
//                empty ones (1: WSClean 3.1; later versions leave them 0), with
//                f^2 = (5 * 10^-R)^2 / (sum_k W_k^2 / sum_i w_i)
//   rank filter  a nonzero cell weight above rank_filter times the mean of the nonzero cell weights
//                in its window (columns [x - d, x + d), rows [y - d, y + d), clipped to the grid,
//                d = rank_filter_size / 2) is set to that bound
//   visibility   w_i times the weight of its cell; 0 outside the grid (or for a non-finite uv).
// natural leaves every weight as it is (WSClean multiplies by 1 in every occupied cell; the
// visibilities outside its grid, which it zeroes, lie outside every uvflow imaging grid too).
// Under uniform and briggs, a block from another visibility set than the density's (origin,
// visibility count) is an error.
#pragma once

#include <cmath>
#include <memory>
#include <string>

#include "runtime/host_device.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/payloads/weights.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::uvw_weighting {

inline constexpr In<VisBlock> vis_in{.name = "vis", .doc = "visibilities: uu, vv in wavelengths, visibility weights"};
inline constexpr In<WeightDensity> density{
    .name = "density", .arity = Arity::once,
    .doc = "uvw.weight_density over the same visibilities; needed by uniform and briggs, ignored by natural",
    .optional = true};
inline constexpr Out<VisBlock> vis_out{
    .name = "vis", .doc = "the same visibilities with their imaging weights (other arrays shared, not copied)"};

struct Params {
  std::string mode = "uniform";
  double robust = 0.0;
  double rank_filter = 3.0;
  std::int64_t rank_filter_size = 16;
};

inline const StageDecl<Params> decl{
    .type = "uvw.weighting",
    .summary = "imaging weights as WSClean makes them: natural, uniform or Briggs (robust R), with its rank filter",
    .doc = "Multiplies each visibility's weight w_i by the weight of its cell of WSClean's weighting grid, computed once "
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
    "end to end against WSClean's dirty images (tests/wsclean_test).",
    .inputs = {vis_in, density},
    .outputs = {vis_out},
    .params = {{&Params::mode,
                {.name = "mode", .choices = {"natural", "uniform", "briggs"},
                 .doc = "natural: weights unchanged; uniform: divided by the summed weight of their cell; briggs: robust "
                        "R (WSClean's -weight; its default is uniform)"}},
               {&Params::robust,
                {.name = "robust", .min = -10.0, .max = 10.0,
                 .doc = "Briggs' robustness R (mode briggs only): -2 is close to uniform, 2 close to natural (WSClean's "
                        "-weight briggs R)"}},
               {&Params::rank_filter,
                {.name = "rank_filter", .min = 0.0, .max = 1e6,
                 .doc = "WSClean's -weighting-rank-filter (its default, 3): cell weights above this many times their "
                        "window's mean are clipped to it; 0 turns the filter off (uniform and briggs)"}},
               {&Params::rank_filter_size,
                {.name = "rank_filter_size", .unit = "cells", .min = 2.0, .max = 4096.0,
                 .doc = "WSClean's -weighting-rank-filter-size: the window side of the rank filter"}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/uvw/weighting.cu
#endif

}  // namespace uvflow::uvw_weighting

namespace uvflow {

// Shared by the two backends.
namespace weighting {

enum class Mode : int { natural, uniform, briggs };

struct Settings {
  Mode mode = Mode::uniform;
  double robust = 0;
  double rank_filter = 3;  // 0: off
  int rank_filter_size = 16;
  // Reads and checks the parameters together (throws ParamError).
  static Settings of(const uvw_weighting::Params& p);
};

// Input 'density', checked to lie at `where` and to come from the block's visibility set;
// throws when it is not connected.
std::shared_ptr<const WeightDensity> density_input(const Context& ctx, const VisBlock& vis, Location where);

// WSClean's sSq: f^2 = (5 * 10^-R)^2 / (sum W_k^2 / sum w_i); 0 when nothing was gridded.
UVFLOW_HD inline double briggs_f2(double robust, double sum_w, double sum_w2) {
  if (!(sum_w2 > 0 && sum_w > 0)) return 0.0;
  const double numerator_sqrt = 5.0 * exp(-M_LN10 * robust);
  return numerator_sqrt * numerator_sqrt / (sum_w2 / sum_w);
}

// The weight of a cell whose summed visibility weight is W, before the rank filter (uniform or
// briggs; WSClean 3.1's FinishGridding).
UVFLOW_HD inline double cell_weight(Mode m, double W, double f2) {
  if (m == Mode::uniform) return W != 0.0 ? 1.0 / W : 0.0;
  return 1.0 / (1.0 + W * f2);
}

// WSClean's rank-filter window along one axis of n cells: [i - d, i + d) clipped to [0, n).
UVFLOW_HD inline void rank_window(int i, int n, int size, int& lo, int& hi) {
  const int d = size / 2;
  lo = i <= d ? 0 : i - d;
  hi = i + d >= n ? n : i + d;
}

// First pass of the rank filter: the sum and the count of the nonzero cell weights of row y in
// the window of column x.
UVFLOW_HD inline void row_window(const double* cells, int width, int x, int y, int size, double& sum, double& count) {
  int lo, hi;
  rank_window(x, width, size, lo, hi);
  const double* row = cells + std::int64_t(y) * width;
  sum = 0;
  count = 0;
  for (int i = lo; i < hi; ++i)
    if (row[i] != 0.0) sum += row[i], count += 1;
}

// Second pass: cell (x, y) after the rank filter, from the first pass's row sums and counts.
UVFLOW_HD inline double rank_filtered(const double* cells, const double* row_sum, const double* row_count,
                                      int width, int rows, int x, int y, double level, int size) {
  const double v = cells[std::int64_t(y) * width + x];
  if (v == 0.0) return 0.0;
  int lo, hi;
  rank_window(y, rows, size, lo, hi);
  double sum = 0, count = 0;
  for (int r = lo; r < hi; ++r) {
    sum += row_sum[std::int64_t(r) * width + x];
    count += row_count[std::int64_t(r) * width + x];
  }
  const double bound = sum / count * level;
  return v > bound ? bound : v;
}

// The imaging weight of a visibility of weight w in cell k (-1: outside the grid).
UVFLOW_HD inline float imaging_weight(float w, std::int64_t k, const double* cell_weights) {
  return k < 0 ? 0.0f : float(double(w) * cell_weights[k]);
}

}  // namespace weighting
}  // namespace uvflow
