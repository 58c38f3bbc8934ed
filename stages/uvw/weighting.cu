// uvw.weighting, cuda backend: the cell weights (and WSClean's rank filter) computed once on the
// device from the device-resident density, one thread per cell; then one thread per visibility
// looks up its cell. f^2 comes from the density's totals on the device: nothing synchronises
// with the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/cuda_check.hpp"
#include "stages/shared/weighting.hpp"
#include "stages/uvw/weighting.hpp"

namespace uvflow::uvw_weighting {
namespace {

constexpr int kThreads = 256;

__global__ void finish_cells(weighting::Mode mode, double robust, const double* density, const double* totals,
                             std::int64_t n, double* cells) {
  const double f2 = weighting::briggs_f2(robust, totals[0], totals[1]);
  for (std::int64_t k = blockIdx.x * std::int64_t(kThreads) + threadIdx.x; k < n; k += std::int64_t(gridDim.x) * kThreads)
    cells[k] = weighting::cell_weight(mode, density[k], f2);
}

__global__ void row_windows(const double* cells, int width, int rows, int size, double* row_sum, double* row_count) {
  const std::int64_t n = std::int64_t(width) * rows;
  for (std::int64_t k = blockIdx.x * std::int64_t(kThreads) + threadIdx.x; k < n; k += std::int64_t(gridDim.x) * kThreads)
    weighting::row_window(cells, width, int(k % width), int(k / width), size, row_sum[k], row_count[k]);
}

__global__ void rank_filter(const double* cells, const double* row_sum, const double* row_count, int width, int rows,
                            double level, int size, double* out) {
  const std::int64_t n = std::int64_t(width) * rows;
  for (std::int64_t k = blockIdx.x * std::int64_t(kThreads) + threadIdx.x; k < n; k += std::int64_t(gridDim.x) * kThreads)
    out[k] = weighting::rank_filtered(cells, row_sum, row_count, width, rows, int(k % width), int(k / width), level, size);
}

__global__ void apply(const WeightGridGeometry g, std::int64_t n, const float* uu, const float* vv, const float* weight,
                      const double* cell_weights, float* out) {
  for (std::int64_t i = blockIdx.x * std::int64_t(kThreads) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * kThreads)
    out[i] = weighting::imaging_weight(weight[i], weight_cell(g, uu[i], vv[i]), cell_weights);
}

class WeightingCuda final : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { s_ = weighting::Settings::of(p); }

  void prepare(PrepareContext& pc) override {
    if (pc.dry_run) return;
    max_blocks_ = device::resident_blocks(reinterpret_cast<const void*>(apply), kThreads);
  }

  void process(Context& ctx) override {
    auto vis = ctx.in(vis_in);
    weighting::check_block(*vis, Location::device);
    auto out = std::make_shared<VisBlock>(*vis);
    if (s_.mode != weighting::Mode::natural) {
      auto d = weighting::density_input(ctx, *vis, Location::device);
      const device::Stream& stream = ctx.stream();
      if (cell_weights_.empty()) make_cell_weights(*d, stream);
      const std::int64_t n = std::int64_t(vis->size());
      out->weight = Array<float>::device(vis->size(), stream);
      if (n > 0) {
        apply<<<blocks(n), kThreads, 0, raw(stream)>>>(d->geom, n, vis->uu.data(), vis->vv.data(), vis->weight.data(),
                                                      cell_weights_.data(), out->weight.data());
        device::check_launch("uvw.weighting: apply launch");
        cell_weights_.storage()->set_last_writer(stream.record());  // freed only after this read
      }
    }
    ctx.add_work({.visibilities = double(vis->size())});
    ctx.emit(vis_out, out);
  }

 private:
  static cudaStream_t raw(const device::Stream& s) { return static_cast<cudaStream_t>(s.native()); }
  unsigned blocks(std::int64_t n) const {
    return unsigned(std::min<std::int64_t>((n + kThreads - 1) / kThreads, max_blocks_));
  }

  // The weight of every cell, once per run: WSClean's FinishGridding, then its rank filter.
  void make_cell_weights(const WeightDensity& d, const device::Stream& stream) {
    const int width = d.geom.width, rows = width / 2;
    const std::int64_t n = d.geom.cells();
    auto cells = Array<double>::device(std::size_t(n), stream);
    finish_cells<<<blocks(n), kThreads, 0, raw(stream)>>>(s_.mode, s_.robust, d.cells.data(), d.totals.data(), n,
                                                          cells.data());
    device::check_launch("uvw.weighting: finish_cells launch");
    if (s_.rank_filter == 0) {
      cell_weights_ = cells;
      return;
    }
    auto row_sum = Array<double>::device(std::size_t(n), stream), row_count = Array<double>::device(std::size_t(n), stream);
    row_windows<<<blocks(n), kThreads, 0, raw(stream)>>>(cells.data(), width, rows, s_.rank_filter_size,
                                                         row_sum.data(), row_count.data());
    device::check_launch("uvw.weighting: row_windows launch");
    cell_weights_ = Array<double>::device(std::size_t(n), stream);
    rank_filter<<<blocks(n), kThreads, 0, raw(stream)>>>(cells.data(), row_sum.data(), row_count.data(), width, rows,
                                                         s_.rank_filter, s_.rank_filter_size, cell_weights_.data());
    device::check_launch("uvw.weighting: rank_filter launch");
    // The scratch arrays are released only after the filter has read them.
    keep_until(stream.record(), {&cells, &row_sum, &row_count});
  }

  weighting::Settings s_;
  int max_blocks_ = 1;
  Array<double> cell_weights_;  // on the device; empty until the first block under uniform or briggs
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WeightingCuda>(); }

}  // namespace uvflow::uvw_weighting
