#include "stages/shared/layouts.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstdlib>

namespace uvflow {

Array<std::int64_t> quarter_offsets(const Array<std::int32_t>& support, int o, std::int64_t* total) {
  auto start = Array<std::int64_t>::host(support.size());
  std::int64_t n = 0;
  for (size_t p = 0; p < support.size(); ++p) {
    const std::int64_t S = kernel_half_size(o, support[p]);
    start[p] = n;
    n += S * S;
  }
  if (total) *total = n;
  return start;
}

void build_kernel_layouts(KernelStack& ks, KernelLayouts which) {
  const int o = ks.oversample, planes = ks.planes;
  ks.max_support = planes > 0 ? *std::max_element(ks.support.begin(), ks.support.end()) : 0;
  std::int64_t qtotal = 0;
  ks.quarter_start = quarter_offsets(ks.support, o, &qtotal);
  if (std::int64_t(ks.quarter.size()) != qtotal)
    throw std::logic_error("kernel stack: quarter holds " + std::to_string(ks.quarter.size()) + " values, supports need " +
                           std::to_string(qtotal));
  // Per-plane starts of the (o+1)-block rows layout and of the (o/2+1)-block OERC layout.
  auto starts = [&](int blocks, std::int64_t* total) {
    auto start = Array<std::int64_t>::host(planes);
    std::int64_t n = 0;
    for (int p = 0; p < planes; ++p) {
      start[p] = n;
      n += blocks * std::int64_t(ks.half_size(p)) * (2 * ks.support[p] + 1);
    }
    *total = n;
    return start;
  };
  std::int64_t n_rows = 0, n_oerc = 0;
  ks.rows_start = which.rows ? starts(o + 1, &n_rows) : Array<std::int64_t>();
  ks.rows = which.rows ? Array<cfloat>::host(n_rows, which.pinned) : Array<cfloat>();
  ks.oerc_start = which.gpu ? starts(o / 2 + 1, &n_oerc) : Array<std::int64_t>();
  ks.oerc = which.gpu ? Array<cfloat>::host(n_oerc, which.pinned) : Array<cfloat>();
  ks.nag = which.gpu ? Array<cfloat>::host(ks.quarter.size(), which.pinned) : Array<cfloat>();
  ks.footprint_sum = Array<double>::host(std::size_t(planes) * (o + 1) * (o + 1), which.pinned);
  tbb::parallel_for(0, planes, [&](int p) {
    const int s = ks.support[p], S = ks.half_size(p), L = 2 * s + 1;
    const cfloat* q = ks.quarter.data() + ks.quarter_start[p];
    auto K = [&](int iy, int ix) { return q[std::int64_t(iy) * S + ix]; };
    if (which.rows) {
      cfloat* r = ks.rows.data() + ks.rows_start[p];
      for (int ou = -o / 2; ou <= o / 2; ++ou)
        for (int iy = 0; iy < S; ++iy) {
          cfloat* row = r + (std::int64_t(ou + o / 2) * S + iy) * L;
          for (int k = -s; k <= s; ++k) row[k + s] = K(iy, std::abs(ou + k * o));
        }
    }
    if (which.gpu) {
      cfloat* e = ks.oerc.data() + ks.oerc_start[p];
      cfloat* g = ks.nag.data() + ks.quarter_start[p];
      for (int ou = -o / 2; ou <= o / 2; ++ou)
        for (int iy = 0; iy < S; ++iy)
          for (int k = -s; k <= s; ++k) {
            if (ou >= 0) e[oerc_offset(s, o, ou, iy, k)] = K(iy, std::abs(ou + k * o));
            g[std::int64_t(iy) * S + nag_column(s, o, ou, k)] = K(iy, std::abs(ou + k * o));
          }
    }
    for (int ov = -o / 2; ov <= o / 2; ++ov)
      for (int ou = -o / 2; ou <= o / 2; ++ou) {
        double sum = 0;
        for (int j = -s; j <= s; ++j)
          for (int k = -s; k <= s; ++k) sum += K(std::abs(ov + j * o), std::abs(ou + k * o)).real();
        ks.footprint_sum[(std::size_t(p) * (o + 1) + ov + o / 2) * (o + 1) + ou + o / 2] = sum;
      }
  });
}

}  // namespace uvflow
