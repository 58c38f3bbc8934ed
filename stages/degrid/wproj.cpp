#include "stages/degrid/wproj.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/combinable.h>
#include <oneapi/tbb/parallel_for.h>

#include <immintrin.h>

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

// A visibility's sum of G * conj(C) over its footprint, in two AVX2 registers of four complex
// products each, kept across all of the footprint's rows and reduced once: with supports of a few
// cells a row is only 9 to 33 values, so per-row reductions or loop set-up would cost more than the
// products. Interleaved (re, im) floats: a += g * c gives (gr cr, gi ci) pairs, b += g * swap(c)
// gives (gr ci, gi cr); a row's last values are read with a mask, never past the row.
class FootprintSum {
 public:
  // One footprint row of n complex values.
  void add(const float* g, const float* c, int n) {
    int t = 0;
    for (; t + 8 <= 2 * n; t += 8) mul_add(_mm256_loadu_ps(g + t), _mm256_loadu_ps(c + t));
    if (t < 2 * n) {
      const __m256i m = tail_mask(2 * n - t);
      mul_add(_mm256_maskload_ps(g + t, m), _mm256_maskload_ps(c + t, m));
    }
  }
  // The same with C blended from four runs (bilinear lookup): C = sum_q w[q] * run_q.
  void add(const float* g, const float* const c[4], const float w[4], int n) {
    const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]), w2 = _mm256_set1_ps(w[2]),
                 w3 = _mm256_set1_ps(w[3]);
    auto blend = [&](auto load) {
      return _mm256_fmadd_ps(w3, load(c[3]), _mm256_fmadd_ps(w2, load(c[2]), _mm256_fmadd_ps(w1, load(c[1]), _mm256_mul_ps(w0, load(c[0])))));
    };
    int t = 0;
    for (; t + 8 <= 2 * n; t += 8) mul_add(_mm256_loadu_ps(g + t), blend([&](const float* r) { return _mm256_loadu_ps(r + t); }));
    if (t < 2 * n) {
      const __m256i m = tail_mask(2 * n - t);
      mul_add(_mm256_maskload_ps(g + t, m), blend([&](const float* r) { return _mm256_maskload_ps(r + t, m); }));
    }
  }
  // G * conj(C) with C's imaginary part times `sign` (conjugated kernels for w > 0); resets.
  cfloat take(float sign) {
    alignas(32) float a[8], b[8];
    _mm256_store_ps(a, a_);
    _mm256_store_ps(b, b_);
    const float rr = a[0] + a[2] + a[4] + a[6], ii = a[1] + a[3] + a[5] + a[7];
    const float ri = b[0] + b[2] + b[4] + b[6], ir = b[1] + b[3] + b[5] + b[7];
    a_ = b_ = _mm256_setzero_ps();
    return {rr + sign * ii, ir - sign * ri};
  }

 private:
  void mul_add(__m256 g, __m256 c) {
    a_ = _mm256_fmadd_ps(g, c, a_);
    b_ = _mm256_fmadd_ps(g, _mm256_permute_ps(c, 0xB1), b_);  // (ci, cr) pairs
  }
  static __m256i tail_mask(int floats) {  // the first `floats` (< 8) lanes
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(floats), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  __m256 a_ = _mm256_setzero_ps(), b_ = _mm256_setzero_ps();
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
      FootprintSum sum;
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
        if (!linear_) {
          for (int j = -s; j <= s; ++j) {
            const int iy = std::abs(c.off_v + j * o);
            sum.add(reinterpret_cast<const float*>(g0 + (j + s) * N),
                    reinterpret_cast<const float*>(runs + std::int64_t(iy) * len), len);
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
            sum.add(reinterpret_cast<const float*>(g0 + (j + s) * N), c4, w4, len);
          }
        }
        pred[i] = sum.take(sign);
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
