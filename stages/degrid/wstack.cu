// degrid.wstack, cuda backend: the cpu backend's adjoint (stages/shared/wstack.hpp) on the device,
// block by block. The block's |w| range and max |v| are read back first (one wait per block: the
// plane count and the band of grid rows the visibilities read are host loop bounds); the model is
// multiplied by the image-domain factors once; then per w-plane: the model times the conjugate
// screen into the image's columns, the pruned inverse FFT (wstack_cuda.cuh: the image's columns,
// then the band's rows only), and each visibility that touches the plane (one thread each)
// gathers its W x W cells in double. Tested against the cpu backend (tests/gpu_wstack_test.cpp).
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/cufft_plan.hpp"
#include "runtime/error.hpp"
#include "stages/degrid/wstack.hpp"
#include "stages/shared/vis_checks.hpp"
#include "stages/shared/wstack_cuda.cuh"

namespace uvflow::degrid_wstack {
namespace {

constexpr char kWho[] = "degrid.wstack (cuda)";
using wstack::cuda::DevicePlan;

// range: [min |w| bits, max |w| bits, max |v| bits, non-finite uvw count].
__global__ void w_range(const float* uu, const float* vv, const float* ww, std::int64_t n, unsigned* range) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    if (!isfinite(uu[i]) || !isfinite(vv[i]) || !isfinite(ww[i])) {
      atomicAdd(range + 3, 1u);
      continue;
    }
    const unsigned bits = __float_as_uint(fabsf(ww[i]));
    atomicMin(range, bits);
    atomicMax(range + 1, bits);
    atomicMax(range + 2, __float_as_uint(fabsf(vv[i])));
  }
}

// The model times the image-domain factors, transposed as grid.wstack's accumulation is:
// image_t[j][y] for pixel x = n - 1 - j (once per block; float, as the grid is).
__global__ void correct_transposed(DevicePlan p, const float* image, float* image_t) {
  const std::int64_t total = std::int64_t(p.n) * p.n;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i / p.n), y = int(i % p.n), x = p.n - 1 - j;
    image_t[i] = float(image[std::int64_t(y) * p.n + x] * wstack::cuda::correction(p, x, y));
  }
}

// The adjoint of grid.wstack's accumulate: the image's columns (n x ng, zero outside the image's
// rows) of the corrected model times the conjugate screen and the layout's sign.
__global__ void fill_plane(DevicePlan p, int plane, const float* image_t, float2* cols) {
  const std::int64_t total = std::int64_t(p.ng) * p.n;
  const double wp = p.w0 + plane * p.dw;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i / p.ng), Y = int(i % p.ng) - p.ng / 2, X = j - p.n / 2 + 1;
    if (Y < -p.n / 2 || Y >= p.n / 2) {  // image rows y = Y + n/2 in [0, n)
      cols[i] = make_float2(0, 0);
      continue;
    }
    double sn, cs;
    sincospi(2 * wp * wstack::cuda::screen_rate(p, X, Y), &sn, &cs);  // conj(exp(-2 pi i w_p t))
    double a = image_t[std::int64_t(j) * p.n + Y + p.n / 2];
    if ((X + Y) & 1) a = -a;
    cols[i] = make_float2(float(a * cs), float(a * sn));
  }
}

// Each visibility that touches `plane` gathers its W x W cells from the plane's band of rows
// (rows x ng, the band's first row being grid row `lo`).
__global__ void gather_plane(DevicePlan p, int plane, int lo, const float* u, const float* v, const float* w, std::int64_t n,
                             const float2* band, double2* acc) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const bool flip = w[i] < 0;
    const double kw = wstack::cuda::plane_weight(p, fabs(double(w[i])), plane);
    if (kw == 0) continue;
    const double gu = (flip ? -double(u[i]) : double(u[i])) * p.scale, gv = (flip ? -double(v[i]) : double(v[i])) * p.scale;
    double ku[es::kMaxSupport], kv[es::kMaxSupport];
    const int fu = wstack::cuda::axis_taps(p, p.support, gu, ku), fv = wstack::cuda::axis_taps(p, p.support, gv, kv);
    double re = 0, im = 0;
    for (int a = 0; a < p.support; ++a) {
      const float2* row = band + std::int64_t(wstack::cuda::wrap(fv + a + p.ng / 2, p.ng) - lo) * p.ng;
      double rr = 0, ri = 0;
      for (int b = 0; b < p.support; ++b) {
        const float2 g = row[wstack::cuda::wrap(fu + b + p.ng / 2, p.ng)];
        const double k = (b & 1) ? -ku[b] : ku[b];
        rr += k * g.x, ri += k * g.y;
      }
      const double k = (fv + a + fu) & 1 ? -kv[a] : kv[a];
      re += k * rr, im += k * ri;
    }
    acc[i].x += kw * re, acc[i].y += kw * im;
  }
}

__global__ void finalize(DevicePlan p, const float* w, std::int64_t n, const double2* acc, float2* out) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    double sn, cs;
    sincospi(2 * fabs(double(w[i])) * p.t0, &sn, &cs);
    const double re = acc[i].x * cs - acc[i].y * sn, im = acc[i].x * sn + acc[i].y * cs;
    out[i] = make_float2(float(re), float(w[i] < 0 ? -im : im));
  }
}

template <class K>
int blocks_of(K kernel) {
  return device::resident_blocks(reinterpret_cast<const void*>(kernel), 256);
}

class WStackDegridderCuda : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { check_epsilon(p); }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto img = ctx.in(model);
    check_arrays(*block);
    check_on_device(block->uu, "degrid.wstack (cuda): the block");
    check_on_device(img->pixels, "degrid.wstack (cuda): the model image");
    if (!engine_) engine_.emplace(make_engine(*img, params()));
    const wstack::Engine& e = *engine_;
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    const std::int64_t n = std::int64_t(block->size());
    auto out = std::make_shared<VisBlock>(*block);
    out->vis = Array<cfloat>::device(block->size(), stream);
    if (n == 0) {
      ctx.emit(out_vis, out);
      return;
    }

    auto range_dev = Array<unsigned>::device(4, stream);
    const unsigned init[4] = {0x7f800000u, 0u, 0u, 0u};
    device::copy(range_dev.data(), init, sizeof init, device::Copy::host_to_device, stream);
    w_range<<<blocks_of(w_range), 256, 0, s>>>(block->uu.data(), block->vv.data(), block->ww.data(), n, range_dev.data());
    device::check_launch("degrid.wstack: w_range");
    unsigned range[4];
    device::copy(range, range_dev.data(), sizeof range, device::Copy::device_to_host, stream);
    stream.synchronize();
    if (range[3]) throw InputError("block " + std::to_string(block->index) + ": " + std::to_string(range[3]) + " visibilities have non-finite uvw");
    float lim[3];
    std::memcpy(lim, range, sizeof lim);
    const wstack::Planes pl = e.planes(lim[0], lim[1]);
    Array<double> taps, corr;
    const DevicePlan p = wstack::cuda::make_plan(e, pl, stream, taps, corr);
    const wstack::cuda::Band band = wstack::cuda::band_of(p, lim[2]);

    auto grid = Array<cfloat>::device(std::size_t(band.rows) * p.ng, stream);  // the band's rows only
    auto cols = Array<cfloat>::device(std::size_t(p.ng) * p.n, stream);
    auto image_t = Array<float>::device(std::size_t(p.n) * p.n, stream);
    auto acc = Array<double>::device(2 * block->size(), stream);
    device::memset_zero(acc.data(), acc.bytes(), stream);
    correct_transposed<<<blocks_of(correct_transposed), 256, 0, s>>>(p, img->pixels.data(), image_t.data());
    device::check_launch("degrid.wstack: correct_transposed");
    fft_.ensure(p.ng, p.n, band.rows);
    auto scratch = Array<std::uint8_t>::device(fft_.work_bytes(), stream);
    fft_.bind(s, scratch.data());
    auto* g = reinterpret_cast<float2*>(grid.data());
    auto* cg = reinterpret_cast<float2*>(cols.data());
    auto* a = reinterpret_cast<double2*>(acc.data());
    for (int plane = 0; plane < pl.count; ++plane) {
      fill_plane<<<blocks_of(fill_plane), 256, 0, s>>>(p, plane, image_t.data(), cg);
      device::check_launch("degrid.wstack: fill_plane");
      fft_.inverse(cg, g, band.lo);
      gather_plane<<<blocks_of(gather_plane), 256, 0, s>>>(p, plane, band.lo, block->uu.data(), block->vv.data(), block->ww.data(),
                                                           n, g, a);
      device::check_launch("degrid.wstack: gather_plane");
    }
    finalize<<<blocks_of(finalize), 256, 0, s>>>(p, block->ww.data(), n, a, reinterpret_cast<float2*>(out->vis.data()));
    device::check_launch("degrid.wstack: finalize");
    keep_until(stream.record(), {&grid, &cols, &image_t, &acc, &scratch, &taps, &corr, &range_dev});
    const double W = p.support;
    ctx.add_work({.visibilities = double(n), .updates = double(n) * W * W * W});
    ctx.emit(out_vis, out);
  }

 private:
  std::optional<wstack::Engine> engine_;
  wstack::cuda::PrunedFft fft_{kWho};
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WStackDegridderCuda>(); }

}  // namespace uvflow::degrid_wstack
