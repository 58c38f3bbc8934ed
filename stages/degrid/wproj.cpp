#include "stages/degrid/wproj.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/combinable.h>
#include <oneapi/tbb/parallel_for.h>

#include <cstdlib>

#include "runtime/error.hpp"
#include "stages/shared/degrid_inputs.hpp"
#include "stages/shared/placement.hpp"

namespace uvflow::degrid_wproj {
namespace {

void check_rows(const KernelStack& ks) {
  const int planes = ks.planes, o = ks.oversample;
  bool ok = planes >= 1 && ks.support.size() == std::size_t(planes) && ks.rows_start.size() == std::size_t(planes);
  if (ok) {
    const std::int64_t s = ks.support[planes - 1];
    ok = ks.rows_start[planes - 1] + (o + 1) * std::int64_t(ks.half_size(planes - 1)) * (2 * s + 1) <=
         std::int64_t(ks.rows.size());
  }
  if (!ok)
    throw InputError("degrid.wproj: the kernel stack has no rows layout for its " + std::to_string(planes) +
                     " planes: set kernels.wproj's layouts to rows or all");
}

// sum over k < n of G[k] * conj(C[k]) with C's imaginary part times `sign`: four real sums, so
// the loop vectorises; complex values are interleaved (re, im).
inline cfloat gather_row(const float* g, const float* c, int n, float sign) {
  float rr = 0, ii = 0, ir = 0, ri = 0;
  for (int k = 0; k < n; ++k) {
    const float gr = g[2 * k], gi = g[2 * k + 1], cr = c[2 * k], ci = c[2 * k + 1];
    rr += gr * cr;
    ii += gi * ci;
    ir += gi * cr;
    ri += gr * ci;
  }
  return {rr + sign * ii, ir - sign * ri};
}

class WprojDegridder : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    if (p.variant != "uvflow")
      throw ParamError("variant", "'" + p.variant + "' is a cuda design; the cpu backend has one (uvflow)");
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto g = ctx.in(grid);
    auto ks = ctx.in(kernels);
    degrid_inputs::check(*block, *g, *ks, "degrid.wproj");
    check_rows(*ks);
    const Placement placement = Placement::of(*ks);
    const bool placed = block->placed() && block->grid_size == ks->geom.grid_size;
    const int o = ks->oversample, half = o / 2;
    const std::int64_t N = ks->geom.grid_size;
    const cfloat* cells = g->cells.host_data();
    const cfloat* rows = ks->rows.host_data();
    const std::int64_t* rows_start = ks->rows_start.host_data();
    const std::int32_t* support = ks->support.host_data();
    const float *uu = block->uu.host_data(), *vv = block->vv.host_data(), *ww = block->ww.host_data();
    const GridCoord* coords = placed ? block->coords.host_data() : nullptr;

    auto out = std::make_shared<VisBlock>(*block);
    out->vis = Array<cfloat>::host(block->size());
    cfloat* pred = out->vis.data();
    struct Counts {
      double predicted = 0, updates = 0;
      std::int64_t invalid = -1;
    };
    tbb::combinable<Counts> counts;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, block->size(), 512), [&](const auto& r) {
      Counts& n = counts.local();
      for (std::size_t i = r.begin(); i < r.end(); ++i) {
        pred[i] = 0;
        GridCoord c;
        if (coords) {
          c = coords[i];
          if (c.plane < 0) continue;
        } else {
          const Placed p = place(placement, support, uu[i], vv[i], ww[i], c);
          if (p == Placed::invalid) n.invalid = std::int64_t(i);
          if (p != Placed::inside) continue;
        }
        const int s = c.support, len = 2 * s + 1, size = half + o * s + 1;
        const cfloat* runs = rows + rows_start[c.plane] + std::int64_t(c.off_u + half) * size * len;
        const cfloat* g0 = cells + (c.v - s) * N + (c.u - s);
        const float sign = c.conj ? -1.0f : 1.0f;
        cfloat sum = 0;
        for (int j = -s; j <= s; ++j) {
          const int iy = std::abs(c.off_v + j * o);
          sum += gather_row(reinterpret_cast<const float*>(g0 + (j + s) * N),
                            reinterpret_cast<const float*>(runs + std::int64_t(iy) * len), len, sign);
        }
        pred[i] = sum;
        n.predicted += 1;
        n.updates += double(len) * len;
      }
    });
    Counts total;
    counts.combine_each([&](const Counts& n) {
      total.predicted += n.predicted;
      total.updates += n.updates;
      total.invalid = std::max(total.invalid, n.invalid);
    });
    if (total.invalid >= 0)
      throw InputError("block " + std::to_string(block->index) + ", visibility " + std::to_string(total.invalid) +
                       ": uvw is not finite");
    ctx.add_work({.visibilities = total.predicted, .updates = total.updates});
    ctx.emit(model, out);
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WprojDegridder>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::degrid_wproj
