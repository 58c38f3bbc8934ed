// The device side of w-stacking (stages/grid/wstack.cu, stages/degrid/wstack.cu): the same
// kernel taps, planes, screens and image-domain factors as stages/shared/wstack.cpp, which is the
// reference these backends are tested against (tests/gpu_wstack_test.cpp).
#pragma once

#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/buffer.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/cufft_plan.hpp"
#include "stages/shared/es_kernel.hpp"
#include "stages/shared/wstack.hpp"

namespace uvflow::wstack::cuda {

// Everything a device kernel needs, by value; the tables live in device arrays the stage keeps.
struct DevicePlan {
  int n = 0, ng = 0, support = 0, degree = 0;
  double beta = 0, cell = 0, scale = 0;  // scale = ng * cell
  double w0 = 0, dw = 0, t0 = 0;
  int planes = 0;
  const double* taps = nullptr;  // es::Taps coefficients
  const double* corr = nullptr;  // es::Correction samples
  int corr_n = 0;
  double corr_step = 0;
};

// Uploads the engine's tables (on `s`) and fills the plan; `keep` holds the device copies.
inline DevicePlan make_plan(const Engine& e, const Planes& pl, const device::Stream& s, Array<double>& taps_dev,
                            Array<double>& corr_dev) {
  const es::Taps taps(e.kernel());
  const auto& c = taps.coefficients();
  const auto& corr = e.correction().samples();
  taps_dev = Array<double>::device(c.size(), s);
  device::copy(taps_dev.data(), c.data(), c.size() * sizeof(double), device::Copy::host_to_device, s);
  corr_dev = Array<double>::device(corr.size(), s);
  device::copy(corr_dev.data(), corr.data(), corr.size() * sizeof(double), device::Copy::host_to_device, s);
  // The host vectors are copied from pageable memory: the copy has completed when it returns.
  DevicePlan p;
  p.n = e.options().image_size;
  p.ng = e.grid_size();
  p.support = e.kernel().support;
  p.degree = taps.degree();
  p.beta = e.kernel().beta;
  p.cell = e.options().cell_rad;
  p.scale = p.ng * p.cell;
  p.w0 = pl.w0, p.dw = pl.dw, p.t0 = pl.t0, p.planes = pl.count;
  p.taps = taps_dev.data();
  p.corr = corr_dev.data();
  p.corr_n = int(corr.size());
  p.corr_step = e.correction().step();
  return p;
}

__device__ inline int wrap(int a, int n) {
  a %= n;
  return a < 0 ? a + n : a;
}

// The first cell of one axis and its W taps at grid position g. `support` is p.support; a
// compile-time constant there lets the compiler unroll the taps into registers.
__device__ inline int axis_taps(const DevicePlan& p, int support, double g, double* k) {
  const double left = g - support / 2.0;
  const int first = int(ceil(left));
  es::eval_taps(p.taps, p.degree, support, first - left, k);
  return first;
}

// The w-kernel weight of plane `plane` for |w| (0 when the visibility does not touch it).
__device__ inline double plane_weight(const DevicePlan& p, double abs_w, int plane) {
  const double s = (abs_w - p.w0) / p.dw;
  int p0 = int(ceil(s - p.support / 2.0));
  p0 = p0 < 0 ? 0 : (p0 > p.planes - p.support ? p.planes - p.support : p0);
  if (plane < p0 || plane >= p0 + p.support) return 0;
  return es::psi(s - plane, p.support, p.beta);
}

// n - 1 - t0 at pixel offsets (X, Y), as Engine::n_minus_1.
__device__ inline double screen_rate(const DevicePlan& p, int X, int Y) {
  const double l = X * p.cell, m = Y * p.cell, r2 = l * l + m * m;
  return -r2 / (1 + sqrt(1 - r2)) - p.t0;
}

// The product of the three image-domain factors at pixel (x, y).
__device__ inline double correction(const DevicePlan& p, int x, int y) {
  const int X = p.n / 2 - x, Y = y - p.n / 2;
  return es::Correction::interp(p.corr, p.corr_n, p.corr_step, double(X) / p.ng) *
         es::Correction::interp(p.corr, p.corr_n, p.corr_step, double(Y) / p.ng) *
         es::Correction::interp(p.corr, p.corr_n, p.corr_step, p.dw * screen_rate(p, X, Y));
}

// The grid layout of both backends: the cell of v-cell a and u-cell b is stored at row
// wrap(a + ng/2), column wrap(b + ng/2), multiplied by (-1)^(a + b). Shifting the input by ng/2
// multiplies the FFT's output k by (-1)^k, and the (-1)^(a + b) shifts the output by ng/2, so the
// 2-D FFT puts pixel offset (X, Y) at row Y + ng/2, column X + ng/2, times (-1)^(X + Y) (ng is
// even). The rows holding data (|v| <= max|v|) and the image's columns are then contiguous bands,
// which the pruned transform (PrunedFft below) is limited to.

// The rows [lo, lo + rows) that visibilities with |v| <= max_abs_v touch (all when they wrap),
// rounded up to a multiple of 64 so that plans are reused across blocks of similar extent.
struct Band {
  int lo = 0, rows = 0;
};
inline Band band_of(const DevicePlan& p, double max_abs_v) {
  const double reach = max_abs_v * p.scale + p.support / 2.0 + 2;
  const double need = 2 * reach + 3;
  if (!(need < p.ng)) return {0, p.ng};
  const int rows = std::min(p.ng, (int(need) + 64) / 64 * 64);
  return {(p.ng - rows) / 2, rows};
}

// The image's columns of the band's rows, transposed: cols[j][r] = band[r - lo][first + j] for the
// grid rows r in [lo, lo + rows) (band: rows x ng, its row 0 being grid row lo), 0 for the other
// rows (cols: n x ng). 32 x 32 tiles through
// shared memory, so that both sides are read and written along their rows.
__global__ inline void band_to_columns(const float2* band, int ng, int n, int first, int lo, int rows, float2* cols) {
  __shared__ float2 tile[32][33];
  const int j0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int r = r0 + k, j = j0 + threadIdx.x;
    tile[k][threadIdx.x] = r >= lo && r < lo + rows && j < n ? band[std::int64_t(r - lo) * ng + first + j] : make_float2(0, 0);
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int j = j0 + k, r = r0 + threadIdx.x;
    if (j < n && r < ng) cols[std::int64_t(j) * ng + r] = tile[threadIdx.x][k];
  }
}

// Its transpose: band[r - lo][first + j] = cols[j][r] for the band's rows.
__global__ inline void columns_to_band(const float2* cols, int ng, int n, int first, int lo, int rows, float2* band) {
  __shared__ float2 tile[32][33];
  const int j0 = blockIdx.x * 32, r0 = lo + blockIdx.y * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int j = j0 + k, r = r0 + threadIdx.x;
    if (j < n && r < lo + rows) tile[k][threadIdx.x] = cols[std::int64_t(j) * ng + r];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int r = r0 + k, j = j0 + threadIdx.x;
    if (j < n && r < lo + rows) band[std::int64_t(r - lo) * ng + first + j] = tile[threadIdx.x][k];
  }
}

// The pruned 2-D transform of one plane on the layout above, as two batched, contiguous, in-place
// 1-D cuFFT calls (a strided column transform took as long as the whole 2-D one) and a transpose.
// Only the band's rows of the grid exist (`band`, rows x ng, its row 0 being grid row lo): the other rows hold no data (gridding)
// and are read by no visibility (degridding). Forward (grid.wstack): the band's rows, then the
// image's n columns, transposed into `cols` (n x ng, column j of the image's being grid column
// first_column() + j). Inverse (degrid.wstack, the adjoint): `cols` is transformed, its band part
// transposed into `band` (zeroed first: the other columns must be zero), and the band's rows
// transformed. Plans are remade only when the sizes change; their work area is the caller's.
class PrunedFft {
 public:
  explicit PrunedFft(const char* who) : who_(who) {}
  void ensure(int ng, int n, int rows) {
    if (ng == ng_ && n == n_ && rows == rows_) return;
    row_.reset(), col_.reset();
    ng_ = n_ = rows_ = 0;
    auto row = std::make_unique<device::FftPlan>(who_), col = std::make_unique<device::FftPlan>(who_);
    int len = ng;
    std::size_t wr = 0, wc = 0;
    device::check_cufft(cufftMakePlanMany(row->get(), 1, &len, nullptr, 1, ng, nullptr, 1, ng, CUFFT_C2C, rows, &wr), who_,
                        "cufftMakePlanMany (rows)");
    device::check_cufft(cufftMakePlanMany(col->get(), 1, &len, nullptr, 1, ng, nullptr, 1, ng, CUFFT_C2C, n, &wc), who_,
                        "cufftMakePlanMany (columns)");
    row_ = std::move(row), col_ = std::move(col);
    ng_ = ng, n_ = n, rows_ = rows;
    work_ = std::max<std::size_t>({wr, wc, 1});
  }
  std::size_t work_bytes() const { return work_; }
  void bind(cudaStream_t s, void* work) {
    s_ = s;
    for (const auto* plan : {row_.get(), col_.get()}) {
      device::check_cufft(cufftSetStream(plan->get(), s), who_, "cufftSetStream");
      device::check_cufft(cufftSetWorkArea(plan->get(), work), who_, "cufftSetWorkArea");
    }
  }
  // The first image column's index in the grid: X = -n/2 + 1 is at column ng/2 - n/2 + 1.
  int first_column() const { return ng_ / 2 - n_ / 2 + 1; }
  void forward(float2* band, int lo, float2* cols) const {
    exec(row_.get(), band, CUFFT_FORWARD);
    band_to_columns<<<dim3((n_ + 31) / 32, (ng_ + 31) / 32), dim3(32, 8), 0, s_>>>(band, ng_, n_, first_column(), lo, rows_, cols);
    device::check_launch("w-stacking: band_to_columns");
    exec(col_.get(), cols, CUFFT_FORWARD);
  }
  void inverse(float2* cols, float2* band, int lo) const {
    exec(col_.get(), cols, CUFFT_INVERSE);
    check(cudaMemsetAsync(band, 0, std::size_t(rows_) * ng_ * sizeof(float2), s_), "cudaMemsetAsync");
    columns_to_band<<<dim3((n_ + 31) / 32, (rows_ + 31) / 32), dim3(32, 8), 0, s_>>>(cols, ng_, n_, first_column(), lo, rows_, band);
    device::check_launch("w-stacking: columns_to_band");
    exec(row_.get(), band, CUFFT_INVERSE);
  }

 private:
  void exec(const device::FftPlan* plan, float2* data, int dir) const {
    auto* d = reinterpret_cast<cufftComplex*>(data);
    device::check_cufft(cufftExecC2C(plan->get(), d, d, dir), who_, "cufftExecC2C");
  }
  void check(cudaError_t e, const char* what) const { device::check(e, who_, what); }
  const char* who_;
  cudaStream_t s_ = nullptr;
  std::unique_ptr<device::FftPlan> row_, col_;
  int ng_ = 0, n_ = 0, rows_ = 0;
  std::size_t work_ = 1;
};

}  // namespace uvflow::wstack::cuda
