// uvw.weighting: imaging weights as WSClean makes them (natural, uniform, Briggs, with its
// weighting rank filter), applied to a visibility stream.
//
//   in   vis      VisBlock, stream, backend residency: uu, vv in wavelengths, visibility weights
//   in   density  WeightDensity, once, backend residency, optional: the output of
//                 uvw.weight_density over the same visibilities; needed by uniform and briggs,
//                 ignored by natural (which may leave it unconnected)
//   out  vis      VisBlock, stream, backend residency: the same block, weight = imaging weight
//   params
//     mode              choice natural | uniform | briggs, default uniform (WSClean's default)
//     robust            number, 0, [-10, 10]: Briggs' robustness R (mode briggs only)
//     rank_filter       number, 3, 0 or >= 1: WSClean's -weighting-rank-filter (0: off)
//     rank_filter_size  integer, 16, [2, 4096]: WSClean's -weighting-rank-filter-size
//   backends: cpu  oneTBB over cells and visibilities
//             cuda one thread per cell, then per visibility; only in a build with CUDA
//
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

#include "runtime/host_device.hpp"
#include "runtime/payloads/weights.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec uvw_weighting_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_weighting_cuda();  // stages/uvw/weighting.cu
#endif

// Shared by the two backends.
namespace weighting {

enum class Mode : int { natural, uniform, briggs };

struct Settings {
  Mode mode = Mode::uniform;
  double robust = 0;
  double rank_filter = 3;  // 0: off
  int rank_filter_size = 16;
  // Reads and checks the parameters together (throws ParamError).
  static Settings of(const Params& p);
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
