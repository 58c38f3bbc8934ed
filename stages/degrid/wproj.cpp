#include "stages/degrid/wproj.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/combinable.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "runtime/error.hpp"
#include "stages/shared/degrid_inputs.hpp"
#include "stages/shared/kernel_lookup.hpp"
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

// A visibility's sum of G * conj(C) over its footprint, kept as four real partial sums per
// footprint column (lanes) while the rows are added: the row loops then vectorise without a
// reduction, and the lanes are summed once per visibility. Complex values are interleaved (re, im).
class Lanes {
 public:
  explicit Lanes(int max_len) : v_(4 * std::size_t(max_len)) {}
  void start(int len) {
    len_ = len;
    std::fill(v_.begin(), v_.begin() + 4 * len, 0.0f);
  }
  // One footprint row: G[k] and C[k] for k < len.
  void add(const float* g, const float* c) {
    float *rr = v_.data(), *ii = rr + len_, *ir = ii + len_, *ri = ir + len_;
    for (int k = 0; k < len_; ++k) {
      const float gr = g[2 * k], gi = g[2 * k + 1], cr = c[2 * k], ci = c[2 * k + 1];
      rr[k] += gr * cr;
      ii[k] += gi * ci;
      ir[k] += gi * cr;
      ri[k] += gr * ci;
    }
  }
  // The same with C blended from four runs (bilinear kernel lookup): C = sum_q w[q] * run_q[k].
  void add(const float* g, const float* const c[4], const float w[4]) {
    float *rr = v_.data(), *ii = rr + len_, *ir = ii + len_, *ri = ir + len_;
    for (int k = 0; k < len_; ++k) {
      const float cr = w[0] * c[0][2 * k] + w[1] * c[1][2 * k] + w[2] * c[2][2 * k] + w[3] * c[3][2 * k];
      const float ci = w[0] * c[0][2 * k + 1] + w[1] * c[1][2 * k + 1] + w[2] * c[2][2 * k + 1] + w[3] * c[3][2 * k + 1];
      const float gr = g[2 * k], gi = g[2 * k + 1];
      rr[k] += gr * cr;
      ii[k] += gi * ci;
      ir[k] += gi * cr;
      ri[k] += gr * ci;
    }
  }
  // G * conj(C) with C's imaginary part times `sign` (conjugated kernels for w > 0).
  cfloat sum(float sign) const {
    const float *rr = v_.data(), *ii = rr + len_, *ir = ii + len_, *ri = ir + len_;
    float a = 0, b = 0, c = 0, d = 0;
#pragma omp simd reduction(+ : a, b, c, d)
    for (int k = 0; k < len_; ++k) {
      a += rr[k];
      b += ii[k];
      c += ir[k];
      d += ri[k];
    }
    return {a + sign * b, c - sign * d};
  }

 private:
  std::vector<float> v_;
  int len_ = 0;
};

class WprojDegridder : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    if (p.variant != "uvflow")
      throw ParamError("variant", "'" + p.variant + "' is a cuda design; the cpu backend has one (uvflow)");
    linear_ = p.kernel_lookup == "linear";
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
      Lanes lanes(2 * ks->max_support + 1);
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
        lanes.start(len);
        if (!linear_) {
          for (int j = -s; j <= s; ++j) {
            const int iy = std::abs(c.off_v + j * o);
            lanes.add(reinterpret_cast<const float*>(g0 + (j + s) * N),
                      reinterpret_cast<const float*>(runs + std::int64_t(iy) * len));
          }
        } else {
          // The exact sub-sample offsets: u between the runs of off_lo and off_lo + 1 (the
          // kernel's value at |a| is linear in a between them), v between quarter rows.
          const kernel_lookup::Offsets f = kernel_lookup::exact(placement, uu[i], vv[i]);
          const int off_lo = std::min(int(std::floor(f.u)), half - 1);
          const float tu = float(f.u - off_lo);
          const cfloat* run_lo = rows + rows_start[c.plane] + std::int64_t(off_lo + half) * size * len;
          const cfloat* run_hi = run_lo + std::int64_t(size) * len;
          for (int j = -s; j <= s; ++j) {
            const double y = std::fabs(f.v + j * o);
            const int y0 = std::min(int(y), size - 1), y1 = std::min(y0 + 1, size - 1);
            const float ty = float(y - y0);
            const float* c4[4] = {reinterpret_cast<const float*>(run_lo + std::int64_t(y0) * len),
                                  reinterpret_cast<const float*>(run_hi + std::int64_t(y0) * len),
                                  reinterpret_cast<const float*>(run_lo + std::int64_t(y1) * len),
                                  reinterpret_cast<const float*>(run_hi + std::int64_t(y1) * len)};
            const float w4[4] = {(1 - ty) * (1 - tu), (1 - ty) * tu, ty * (1 - tu), ty * tu};
            lanes.add(reinterpret_cast<const float*>(g0 + (j + s) * N), c4, w4);
          }
        }
        pred[i] = lanes.sum(sign);
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

 private:
  bool linear_ = false;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<WprojDegridder>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::degrid_wproj
