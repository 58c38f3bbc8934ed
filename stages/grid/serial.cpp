#include "stages/grid/serial.hpp"

#include <cstdlib>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/payloads/kernels.hpp"
#include "stages/shared/kernel_lookup.hpp"
#include "stages/shared/placement.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::grid_serial {
namespace {

void check_quarter(const KernelStack& ks) {
  const int last = ks.planes - 1;
  if (std::int64_t(ks.quarter_start.size()) != ks.planes ||
      std::int64_t(ks.quarter.size()) < ks.quarter_start[last] + std::int64_t(ks.half_size(last)) * ks.half_size(last))
    throw InputError("kernel stack: quarter kernels (" + std::to_string(ks.quarter.size()) + " values, " +
                     std::to_string(ks.quarter_start.size()) + " plane starts) do not match " + std::to_string(ks.planes) +
                     " planes and their supports");
}

// grid += (vis * weight) * C for one cell (re, im at g), in T: float is Listing 1's arithmetic.
template <class T>
void add_update(T* g, float val_re, float val_im, float cwt_re, float cwt_im) {
  g[0] += T(val_re) * T(cwt_re) - T(val_im) * T(cwt_im);
  g[1] += T(val_im) * T(cwt_re) + T(val_re) * T(cwt_im);
}

class SerialGridder : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    linear_ = p.kernel_lookup == "linear";
    wide_ = p.accumulate == "double";
  }

  void prepare(PrepareContext& pc) override {
    if (const auto& g = pc.output(grid).grid; g && !pc.dry_run) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(*g, nullptr));
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto ks = ctx.in(kernels);
    check_arrays(*block);
    const Placement placement = Placement::of(*ks);
    check_quarter(*ks);
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(ks->geom, nullptr));
    expect_geometry(*grid_, ks->geom, "grid.serial");
    if (!grid_->obs) grid_->obs = block->obs;
    if (wide_ && sums_.empty()) sums_.assign(2 * grid_->cells.size(), 0.0);

    const int o = ks->oversample;
    const std::int64_t grid_size = ks->geom.grid_size;
    float* cells = reinterpret_cast<float*>(grid_->cells.data());
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
      const kernel_lookup::Offsets f =
          linear_ ? kernel_lookup::exact(placement, uu[i], vv[i]) : kernel_lookup::Offsets{double(c.off_u), double(c.off_v)};
      double sum = 0;
      for (int j = -s; j <= s; ++j) {
        for (int k = -s; k <= s; ++k) {
          // nearest reads the sample itself, as Listing 1 does (no interpolation cost).
          const std::complex<double> kv =
              linear_ ? kernel_lookup::bilinear(kernel, size, std::fabs(f.v + j * o), std::fabs(f.u + k * o))
                      : std::complex<double>(kernel[std::abs(c.off_v + j * o) * size + std::abs(c.off_u + k * o)]);
          const float cwt_re = float(kv.real()), cwt_im = conv_mul * float(kv.imag());
          sum += cwt_re;
          const std::int64_t cell = 2 * ((c.v + j) * grid_size + c.u + k);
          if (wide_)
            add_update(sums_.data() + cell, val_re, val_im, cwt_re, cwt_im);
          else
            add_update(cells + cell, val_re, val_im, cwt_re, cwt_im);
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
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(ctx.in(kernels)->geom, nullptr));
    if (!sums_.empty()) {
      cfloat* cells = grid_->cells.data();
      for (std::size_t i = 0; i < grid_->cells.size(); ++i) cells[i] = cfloat(float(sums_[2 * i]), float(sums_[2 * i + 1]));
      sums_ = {};
    }
    ctx.emit(grid, grid_);
  }

 private:
  bool linear_ = false, wide_ = false;
  std::shared_ptr<Grid> grid_;
  std::vector<double> sums_;  // accumulate: double: the grid's (re, im) sums
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<SerialGridder>()}); }

}  // namespace uvflow::grid_serial
