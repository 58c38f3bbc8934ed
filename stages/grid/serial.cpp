#include "stages/grid/serial.hpp"

#include <cstdlib>

#include "runtime/error.hpp"
#include "runtime/payloads/kernels.hpp"
#include "stages/uvw/w_sort.hpp"

namespace uvflow {
namespace {

void check_quarter(const KernelStack& ks) {
  const int last = ks.planes - 1;
  if (std::int64_t(ks.quarter_start.size()) != ks.planes ||
      std::int64_t(ks.quarter.size()) < ks.quarter_start[last] + std::int64_t(ks.half_size(last)) * ks.half_size(last))
    throw InputError("kernel stack: quarter kernels (" + std::to_string(ks.quarter.size()) + " values, " +
                     std::to_string(ks.quarter_start.size()) + " plane starts) do not match " + std::to_string(ks.planes) +
                     " planes and their supports");
}

class SerialGridder : public Stage {
 public:
  void process(Context& ctx) override {
    auto block = ctx.in<VisBlock>("vis");
    auto ks = ctx.in<KernelStack>("kernels");
    check_arrays(*block);
    const Placement placement = Placement::of(*ks);
    check_quarter(*ks);
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(ks->geom, block->obs));

    const int o = ks->oversample;
    const std::int64_t grid_size = ks->geom.grid_size;
    float* grid = reinterpret_cast<float*>(grid_->cells.data());
    const float *uu = block->uu.host_data(), *vv = block->vv.host_data(), *ww = block->ww.host_data();
    const float* weight = block->weight.host_data();
    const cfloat* vis = block->vis.host_data();
    double norm = 0, updates = 0;
    std::int64_t gridded = 0, skipped = block->skipped;
    for (std::size_t i = 0; i < block->size(); ++i) {
      GridCoord c;
      const Placed r = place(placement, ks->support.host_data(), uu[i], vv[i], ww[i], c);
      if (r == Placed::invalid)
        throw InputError("block " + std::to_string(block->index) + ", visibility " + std::to_string(i) +
                         ": uvw is not finite");
      if (r == Placed::outside) {
        ++skipped;
        continue;
      }
      const int s = c.support, size = ks->half_size(c.plane);
      const cfloat* kernel = ks->quarter.data() + ks->quarter_start[c.plane];
      const float conv_mul = c.conj ? -1.0f : 1.0f;
      const float val_re = vis[i].real() * weight[i], val_im = vis[i].imag() * weight[i];
      double sum = 0;
      for (int j = -s; j <= s; ++j) {
        const int iy = std::abs(c.off_v + j * o);
        for (int k = -s; k <= s; ++k) {
          const int ix = std::abs(c.off_u + k * o);
          const float cwt_re = kernel[iy * size + ix].real(), cwt_im = conv_mul * kernel[iy * size + ix].imag();
          sum += cwt_re;
          float* g = grid + 2 * ((c.v + j) * grid_size + c.u + k);
          g[0] += val_re * cwt_re - val_im * cwt_im;
          g[1] += val_im * cwt_re + val_re * cwt_im;
        }
      }
      norm += sum * weight[i];
      ++gridded;
      updates += double(2 * s + 1) * (2 * s + 1);
    }
    grid_->totals[0] += norm;
    grid_->totals[1] += double(gridded);
    grid_->totals[2] += double(skipped);
    ctx.add_work({.visibilities = double(gridded), .updates = updates});
  }

  void finish(Context& ctx) override {
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(ctx.in<KernelStack>("kernels")->geom, nullptr));
    ctx.emit("grid", grid_);
  }

 private:
  std::shared_ptr<Grid> grid_;
};

}  // namespace

StageSpec grid_serial_spec() {
  StageSpec s;
  s.type = "grid.serial";
  s.summary = "serial reference gridder (NAG memo Listing 1): one visibility at a time, no sorting";
  s.doc =
      "Convolves each visibility with its w-plane's kernel onto a single-precision grid exactly as the serial code "
      "of the NAG memo does: for j, k in [-s, s], C = K[plane][|off_v + j*o|][|off_u + k*o|] from the quarter "
      "kernels, conjugated when ww > 0, grid[v+j][u+k] += (vis*weight) * C, norm += weight * sum Re(C) in double. "
      "Positions, planes and offsets follow the DESIGN.md conventions (the same placement as uvw.w_sort). "
      "Visibilities whose footprint would leave the grid are skipped and counted. The slow, plain yardstick the "
      "other gridders are checked and timed against; it is itself tested against an independent double-precision "
      "loop (relative Frobenius norm of the grid below 1e-5, same norm and skipped count).";
  s.inputs = {{"vis", kVisBlock, Arity::stream, Residency::backend, "visibilities, in any order"},
              {"kernels", kKernelStack, Arity::once, Residency::backend, "quarter kernels, supports, grid geometry"}};
  s.outputs = {{"grid", kGrid, Arity::once, Residency::backend, "the accumulated grid, norm, gridded and skipped counts"}};
  s.backends = {{"cpu", [] { return std::make_unique<SerialGridder>(); }}};
  s.concurrency = Concurrency::serial;
  return s;
}

}  // namespace uvflow
