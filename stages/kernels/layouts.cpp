#include "stages/kernels/layouts.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <cstdlib>

namespace uvflow {

Array<std::int64_t> quarter_offsets(const Array<std::int32_t>& support, int o, std::int64_t* total) {
  auto start = Array<std::int64_t>::host(support.size());
  std::int64_t n = 0;
  for (size_t p = 0; p < support.size(); ++p) {
    std::int64_t S = o / 2 + std::int64_t(o) * support[p] + 1;
    start[p] = n;
    n += S * S;
  }
  if (total) *total = n;
  return start;
}

void build_kernel_layouts(KernelStack& ks) {
  const int o = ks.oversample, planes = ks.planes;
  std::int64_t qtotal = 0;
  ks.quarter_start = quarter_offsets(ks.support, o, &qtotal);
  if (std::int64_t(ks.quarter.size()) != qtotal)
    throw std::logic_error("kernel stack: quarter holds " + std::to_string(ks.quarter.size()) + " values, supports need " +
                           std::to_string(qtotal));
  ks.rows_start = Array<std::int64_t>::host(planes);
  std::int64_t n = 0;
  for (int p = 0; p < planes; ++p) {
    const std::int64_t s = ks.support[p], S = ks.half_size(p);
    ks.rows_start[p] = n;
    n += (o + 1) * S * (2 * s + 1);
  }
  ks.rows = Array<cfloat>::host(n);
  ks.footprint_sum = Array<double>::host(std::size_t(planes) * (o + 1) * (o + 1));
  tbb::parallel_for(0, planes, [&](int p) {
    const int s = ks.support[p], S = ks.half_size(p), L = 2 * s + 1;
    const cfloat* q = ks.quarter.data() + ks.quarter_start[p];
    cfloat* r = ks.rows.data() + ks.rows_start[p];
    for (int ou = -o / 2; ou <= o / 2; ++ou)
      for (int iy = 0; iy < S; ++iy) {
        cfloat* row = r + (std::int64_t(ou + o / 2) * S + iy) * L;
        for (int k = -s; k <= s; ++k) row[k + s] = q[std::int64_t(iy) * S + std::abs(ou + k * o)];
      }
    for (int ov = -o / 2; ov <= o / 2; ++ov)
      for (int ou = -o / 2; ou <= o / 2; ++ou) {
        double sum = 0;
        for (int j = -s; j <= s; ++j) {
          const cfloat* row = r + (std::int64_t(ou + o / 2) * S + std::abs(ov + j * o)) * L;
          for (int k = 0; k < L; ++k) sum += row[k].real();
        }
        ks.footprint_sum[(std::size_t(p) * (o + 1) + ov + o / 2) * (o + 1) + ou + o / 2] = sum;
      }
  });
}

}  // namespace uvflow
