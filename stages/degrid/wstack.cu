// degrid.wstack, cuda backend: the cpu backend's adjoint (stages/shared/wstack.hpp) on the device,
// block by block. The block's |w| range is read back first (one wait per block: the plane count
// is a host loop bound); then per w-plane: the model image times the image-domain factors and the
// conjugate screen into the zeroed grid, cuFFT inverse, and each visibility that touches the plane
// (one thread each) gathers its W x W cells in double. Tested against the cpu backend
// (tests/gpu_wstack_test.cpp).
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

// range: [min |w| bits, max |w| bits, non-finite uvw count].
__global__ void w_range(const float* uu, const float* vv, const float* ww, std::int64_t n, unsigned* range) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    if (!isfinite(uu[i]) || !isfinite(vv[i]) || !isfinite(ww[i])) {
      atomicAdd(range + 2, 1u);
      continue;
    }
    const unsigned bits = __float_as_uint(fabsf(ww[i]));
    atomicMin(range, bits);
    atomicMax(range + 1, bits);
  }
}

__global__ void fill_plane(DevicePlan p, int plane, const float* image, float2* grid) {
  const std::int64_t total = std::int64_t(p.n) * p.n;
  const double wp = p.w0 + plane * p.dw;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int x = int(i % p.n), y = int(i / p.n), X = p.n / 2 - x, Y = y - p.n / 2;
    double sn, cs;
    sincospi(2 * wp * wstack::cuda::screen_rate(p, X, Y), &sn, &cs);  // conj(exp(-2 pi i w_p t))
    const double a = image[i] * wstack::cuda::correction(p, x, y);
    grid[std::int64_t(wstack::cuda::wrap(Y, p.ng)) * p.ng + wstack::cuda::wrap(X, p.ng)] = make_float2(float(a * cs), float(a * sn));
  }
}

__global__ void gather_plane(DevicePlan p, int plane, const float* u, const float* v, const float* w, std::int64_t n,
                             const float2* grid, double2* acc) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const bool flip = w[i] < 0;
    const double kw = wstack::cuda::plane_weight(p, fabs(double(w[i])), plane);
    if (kw == 0) continue;
    const double gu = (flip ? -double(u[i]) : double(u[i])) * p.scale, gv = (flip ? -double(v[i]) : double(v[i])) * p.scale;
    double ku[es::kMaxSupport], kv[es::kMaxSupport];
    const int fu = wstack::cuda::axis_taps(p, gu, ku), fv = wstack::cuda::axis_taps(p, gv, kv);
    double re = 0, im = 0;
    for (int j = 0; j < p.support; ++j) {
      const float2* row = grid + std::int64_t(wstack::cuda::wrap(fv + j, p.ng)) * p.ng;
      double rr = 0, ri = 0;
      for (int k = 0; k < p.support; ++k) {
        const float2 g = row[wstack::cuda::wrap(fu + k, p.ng)];
        rr += ku[k] * g.x, ri += ku[k] * g.y;
      }
      re += kv[j] * rr, im += kv[j] * ri;
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

    auto range_dev = Array<unsigned>::device(3, stream);
    const unsigned init[3] = {0x7f800000u, 0u, 0u};
    device::copy(range_dev.data(), init, sizeof init, device::Copy::host_to_device, stream);
    w_range<<<blocks_of(w_range), 256, 0, s>>>(block->uu.data(), block->vv.data(), block->ww.data(), n, range_dev.data());
    device::check_launch("degrid.wstack: w_range");
    unsigned range[3];
    device::copy(range, range_dev.data(), sizeof range, device::Copy::device_to_host, stream);
    stream.synchronize();
    if (range[2]) throw InputError("block " + std::to_string(block->index) + ": " + std::to_string(range[2]) + " visibilities have non-finite uvw");
    float wlo, whi;
    std::memcpy(&wlo, &range[0], sizeof wlo);
    std::memcpy(&whi, &range[1], sizeof whi);
    const wstack::Planes pl = e.planes(wlo, whi);
    Array<double> taps, corr;
    const DevicePlan p = wstack::cuda::make_plan(e, pl, stream, taps, corr);

    auto grid = Array<cfloat>::device(std::size_t(p.ng) * p.ng, stream);
    auto acc = Array<double>::device(2 * block->size(), stream);
    device::memset_zero(acc.data(), acc.bytes(), stream);
    plan_.ensure(p.ng);
    device::check_cufft(cufftSetStream(plan_.get(), s), kWho, "cufftSetStream");
    auto scratch = Array<std::uint8_t>::device(std::max<std::size_t>(plan_.work_bytes(), 1), stream);
    device::check_cufft(cufftSetWorkArea(plan_.get(), scratch.data()), kWho, "cufftSetWorkArea");
    auto* g = reinterpret_cast<float2*>(grid.data());
    auto* a = reinterpret_cast<double2*>(acc.data());
    for (int plane = 0; plane < pl.count; ++plane) {
      device::memset_zero(grid.data(), grid.bytes(), stream);
      fill_plane<<<blocks_of(fill_plane), 256, 0, s>>>(p, plane, img->pixels.data(), g);
      device::check_launch("degrid.wstack: fill_plane");
      auto* cg = reinterpret_cast<cufftComplex*>(g);
      device::check_cufft(cufftExecC2C(plan_.get(), cg, cg, CUFFT_INVERSE), kWho, "cufftExecC2C");
      gather_plane<<<blocks_of(gather_plane), 256, 0, s>>>(p, plane, block->uu.data(), block->vv.data(), block->ww.data(), n, g, a);
      device::check_launch("degrid.wstack: gather_plane");
    }
    finalize<<<blocks_of(finalize), 256, 0, s>>>(p, block->ww.data(), n, a, reinterpret_cast<float2*>(out->vis.data()));
    device::check_launch("degrid.wstack: finalize");
    keep_until(stream.record(), {&grid, &acc, &scratch, &taps, &corr, &range_dev});
    const double W = p.support;
    ctx.add_work({.visibilities = double(n), .updates = double(n) * W * W * W});
    ctx.emit(out_vis, out);
  }

 private:
  std::optional<wstack::Engine> engine_;
  device::SquarePlan plan_{kWho};
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WStackDegridderCuda>(); }

}  // namespace uvflow::degrid_wstack
