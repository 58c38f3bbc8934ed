#include "stages/degrid/serial.hpp"

#include <cmath>
#include <complex>
#include <cstdlib>

#include "runtime/error.hpp"
#include "stages/shared/degrid_inputs.hpp"
#include "stages/shared/kernel_lookup.hpp"
#include "stages/shared/placement.hpp"

namespace uvflow::degrid_serial {
namespace {

class SerialDegridder : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { linear_ = p.kernel_lookup == "linear"; }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto g = ctx.in(grid);
    auto ks = ctx.in(kernels);
    degrid_inputs::check(*block, *g, *ks, "degrid.serial");
    const Placement placement = Placement::of(*ks);
    const int o = ks->oversample;
    const std::int64_t N = ks->geom.grid_size;
    const cfloat* cells = g->cells.host_data();
    const float *uu = block->uu.host_data(), *vv = block->vv.host_data(), *ww = block->ww.host_data();

    auto out = std::make_shared<VisBlock>(*block);
    out->vis = Array<cfloat>::host(block->size());
    cfloat* pred = out->vis.data();
    double updates = 0, predicted = 0;
    for (std::size_t i = 0; i < block->size(); ++i) {
      GridCoord c;
      const Placed r = place(placement, ks->support.host_data(), uu[i], vv[i], ww[i], c);
      if (r == Placed::invalid)
        throw InputError("block " + std::to_string(block->index) + ", visibility " + std::to_string(i) +
                         ": uvw is not finite");
      pred[i] = 0;
      if (r == Placed::outside) continue;
      const int s = c.support, size = ks->half_size(c.plane);
      const cfloat* kernel = ks->quarter.data() + ks->quarter_start[c.plane];
      const float conv_mul = c.conj ? -1.0f : 1.0f;
      // Sub-sample offsets in table samples: the rounded ones (nearest), or the exact ones (linear).
      const kernel_lookup::Offsets f =
          linear_ ? kernel_lookup::exact(placement, uu[i], vv[i]) : kernel_lookup::Offsets{double(c.off_u), double(c.off_v)};
      double sum_re = 0, sum_im = 0;
      for (int j = -s; j <= s; ++j) {
        for (int k = -s; k <= s; ++k) {
          // The gridder's C = (cr, conv_mul * ci); the degridder reads G * conj(C).
          // nearest reads the sample itself, as Listing 1 does (no interpolation cost).
          const std::complex<double> kv =
              linear_ ? kernel_lookup::bilinear(kernel, size, std::fabs(f.v + j * o), std::fabs(f.u + k * o))
                      : std::complex<double>(kernel[std::abs(c.off_v + j * o) * size + std::abs(c.off_u + k * o)]);
          const double cr = kv.real(), ci = conv_mul * kv.imag();
          const cfloat gv = cells[(c.v + j) * N + c.u + k];
          sum_re += gv.real() * cr + gv.imag() * ci;
          sum_im += gv.imag() * cr - gv.real() * ci;
        }
      }
      pred[i] = cfloat(float(sum_re), float(sum_im));
      ++predicted;
      updates += double(2 * s + 1) * (2 * s + 1);
    }
    ctx.add_work({.visibilities = predicted, .updates = updates});
    ctx.emit(model, out);
  }

 private:
  bool linear_ = false;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<SerialDegridder>()}); }

}  // namespace uvflow::degrid_serial
