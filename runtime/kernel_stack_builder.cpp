#include "runtime/payloads/kernel_stack_builder.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

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

std::shared_ptr<KernelStack> make_kernel_stack(const QuarterKernels& k, KernelLayouts layouts) {
  const int planes = int(k.support.size()), o = k.oversample;
  auto bad = [](const std::string& what) { throw std::invalid_argument("make_kernel_stack: " + what); };
  if (planes < 1) bad("no planes");
  if (k.quarter.size() != k.support.size())
    bad(std::to_string(k.quarter.size()) + " quarter kernels for " + std::to_string(planes) + " supports");
  if (o < 2 || o % 2) bad("oversample " + std::to_string(o) + " is not even and at least 2");
  if (k.geom.grid_size < 2 || k.geom.grid_size % 2 || k.geom.image_size < 1 || k.geom.image_size > k.geom.grid_size ||
      !(k.geom.cell_rad > 0) || !std::isfinite(k.geom.cell_rad))
    bad("grid geometry (" + std::to_string(k.geom.grid_size) + " cells for " + std::to_string(k.geom.image_size) +
        " pixels of " + std::to_string(k.geom.cell_rad) + " rad) is not an even grid at least as large as the image");
  if (planes > 1 && !(k.w_scale > 0 && std::isfinite(k.w_scale)))
    bad("w_scale " + std::to_string(k.w_scale) + " is not positive with " + std::to_string(planes) + " planes");
  auto ks = std::make_shared<KernelStack>();
  ks->geom = k.geom;
  ks->oversample = o;
  ks->conv_size = k.conv_size;
  ks->planes = planes;
  ks->w_scale = k.w_scale;
  ks->max_w = k.max_w;
  ks->support = Array<std::int32_t>::host(planes);
  for (int p = 0; p < planes; ++p) {
    const int s = k.support[p];
    // 2s+1 cells must fit in the grid, and GridCoord keeps the support in 16 bits.
    if (s < 0 || 2 * s + 1 > k.geom.grid_size || s > 32767)
      bad("plane " + std::to_string(p) + ": support " + std::to_string(s) + " does not fit a grid of " +
          std::to_string(k.geom.grid_size) + " cells");
    const std::size_t S = kernel_half_size(o, s);
    if (k.quarter[p].size() != S * S)
      bad("plane " + std::to_string(p) + ": the quarter kernel holds " + std::to_string(k.quarter[p].size()) +
          " values, support " + std::to_string(s) + " at oversample " + std::to_string(o) + " needs " +
          std::to_string(S) + " x " + std::to_string(S));
    ks->support[p] = s;
  }
  std::int64_t total = 0;
  const auto start = quarter_offsets(ks->support, o, &total);
  float scale = 1;
  if (k.normalise) {
    const int s0 = k.support[0], S0 = kernel_half_size(o, s0);
    double norm = 0;
    for (int iy = -s0; iy <= s0; ++iy)
      for (int ix = -s0; ix <= s0; ++ix) norm += k.quarter[0][std::size_t(std::abs(iy) * o) * S0 + std::abs(ix) * o].real();
    if (!(norm > 0) || !std::isfinite(norm))
      bad("plane 0 sums to " + std::to_string(norm) + " at integer offsets: it cannot be normalised");
    scale = float(1.0 / norm);
  }
  ks->quarter = Array<cfloat>::host(std::size_t(total), layouts.pinned);
  tbb::parallel_for(0, planes, [&](int p) {
    cfloat* dst = ks->quarter.data() + start[p];
    for (const cfloat& v : k.quarter[p]) *dst++ = v * scale;
  });
  build_kernel_layouts(*ks, layouts);
  return ks;
}

}  // namespace uvflow
