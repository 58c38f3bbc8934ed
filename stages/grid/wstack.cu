// grid.wstack, cuda backend: the cpu backend's method (stages/shared/wstack.hpp) on the device.
// Each block's u, v, w and weight x visibility are appended to device staging arrays as it
// arrives (with the weight sum and the |w| range, by atomics). At the end of the stream the range
// is read back (the plane count is a host loop bound), the visibilities are sorted by first plane
// (a second wait, for the counts per plane: two per run), and per w-plane: zero the grid, spread
// the visibilities that touch the plane (one thread each, atomics), cuFFT forward, multiply by the
// plane's screen and add the real part into a double image (at epsilon 1e-5 and below the grid is
// accumulated in double, as on the cpu). Last the image-domain factors and 1 / sum of weights.
// Tested against the cpu backend (tests/gpu_wstack_test.cpp).
#include <cuda_runtime.h>
#include <cufft.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cuda_check.hpp"
#include "runtime/cufft_plan.hpp"
#include "runtime/error.hpp"
#include "stages/grid/wstack.hpp"
#include "stages/shared/sky_wcs.hpp"
#include "stages/shared/vis_checks.hpp"
#include "stages/shared/wstack_cuda.cuh"

namespace uvflow::grid_wstack {
namespace {

constexpr char kWho[] = "grid.wstack (cuda)";
using wstack::cuda::DevicePlan;

// stats: [sum of weights, bad uvw count]; range: [min |w| bits, max |w| bits] (non-negative
// floats order as their bit patterns do).
__global__ void append(const float* uu, const float* vv, const float* ww, const float2* vis, const float* weight,
                       std::int64_t n, float* u, float* v, float* w, float2* c, double* stats, unsigned* range) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const float wt = weight[i];
    u[i] = uu[i], v[i] = vv[i], w[i] = ww[i];
    c[i] = make_float2(vis[i].x * wt, vis[i].y * wt);
    if (!isfinite(uu[i]) || !isfinite(vv[i]) || !isfinite(ww[i])) atomicAdd(stats + 1, 1.0);
    if (wt != 0) {
      atomicAdd(stats, double(wt));
      const float a = fabsf(ww[i]);
      const unsigned bits = __float_as_uint(a);
      atomicMin(range, bits);
      atomicMax(range + 1, bits);
    }
  }
}

// Each visibility's first plane (the sort key), its index, and the count per first plane.
__global__ void first_planes(DevicePlan p, const float* w, std::int64_t n, std::int32_t* key, std::int32_t* index,
                             unsigned* count) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const double s = (fabs(double(w[i])) - p.w0) / p.dw;
    int p0 = int(ceil(s - p.support / 2.0));
    p0 = p0 < 0 ? 0 : (p0 > p.planes - p.support ? p.planes - p.support : p0);
    key[i] = p0;
    index[i] = std::int32_t(i);
    atomicAdd(count + p0, 1u);
  }
}

// T: float or double, the precision of the grid's accumulation (Engine's double_grid).
// Visibilities order[first .. first + n), those whose first plane is within W - 1 of `plane`.
template <class T>
__global__ void grid_plane(DevicePlan p, int plane, const float* u, const float* v, const float* w, const float2* c,
                           const std::int32_t* order, std::int64_t first, std::int64_t n, T* grid) {
  for (std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; j < n; j += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = order[first + j];
    const float2 ci = c[i];
    if (ci.x == 0 && ci.y == 0) continue;
    const bool flip = w[i] < 0;
    const double aw = fabs(double(w[i]));
    const double kw = wstack::cuda::plane_weight(p, aw, plane);
    if (kw == 0) continue;
    const double gu = (flip ? -double(u[i]) : double(u[i])) * p.scale, gv = (flip ? -double(v[i]) : double(v[i])) * p.scale;
    // conj when flipped, times exp(-2 pi i |w| t0), times the w-kernel.
    double sn, cs;
    sincospi(-2 * aw * p.t0, &sn, &cs);
    const double cr = ci.x, cim = flip ? -ci.y : ci.y;
    const double re = (cr * cs - cim * sn) * kw, im = (cr * sn + cim * cs) * kw;
    double ku[es::kMaxSupport], kv[es::kMaxSupport];
    const int fu = wstack::cuda::axis_taps(p, gu, ku), fv = wstack::cuda::axis_taps(p, gv, kv);
    for (int j = 0; j < p.support; ++j) {
      T* row = grid + 2 * std::int64_t(wstack::cuda::wrap(fv + j, p.ng)) * p.ng;
      for (int k = 0; k < p.support; ++k) {
        const double f = kv[j] * ku[k];
        T* cell = row + 2 * wstack::cuda::wrap(fu + k, p.ng);
        atomicAdd(cell, T(re * f));
        atomicAdd(cell + 1, T(im * f));
      }
    }
  }
}

__global__ void to_single(const double* in, std::int64_t n, float* out) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = float(in[i]);
}

__global__ void accumulate(DevicePlan p, int plane, const float2* grid, double* acc) {
  const std::int64_t total = std::int64_t(p.n) * p.n;
  const double wp = p.w0 + plane * p.dw;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int x = int(i % p.n), y = int(i / p.n), X = p.n / 2 - x, Y = y - p.n / 2;
    double sn, cs;
    sincospi(-2 * wp * wstack::cuda::screen_rate(p, X, Y), &sn, &cs);
    const float2 f = grid[std::int64_t(wstack::cuda::wrap(Y, p.ng)) * p.ng + wstack::cuda::wrap(X, p.ng)];
    acc[i] += cs * f.x - sn * f.y;
  }
}

__global__ void finalize(DevicePlan p, const double* acc, const double* stats, float* out) {
  const std::int64_t total = std::int64_t(p.n) * p.n;
  const double inv = 1 / stats[0];
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = float(acc[i] * wstack::cuda::correction(p, int(i % p.n), int(i / p.n)) * inv);
}

void cuda_check(cudaError_t e, const char* what) { device::check(e, kWho, what); }

template <class K>
int blocks_of(K kernel) {
  return device::resident_blocks(reinterpret_cast<const void*>(kernel), 256);
}

class WStackGridderCuda : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { engine_.emplace(make_engine(p)); }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    check_arrays(*block);
    for (const ArrayBase* a : {(const ArrayBase*)&block->uu, (const ArrayBase*)&block->vis, (const ArrayBase*)&block->weight})
      check_on_device(*a, "grid.wstack (cuda): the block");
    if (!obs_) obs_ = block->obs;
    const device::Stream& stream = ctx.stream();
    if (stats_.empty()) {
      stats_ = Array<double>::device(2, stream);
      device::memset_zero(stats_.data(), stats_.bytes(), stream);
      range_ = Array<unsigned>::device(2, stream);
      const unsigned init[2] = {0x7f800000u, 0u};  // +inf, 0
      device::copy(range_.data(), init, sizeof init, device::Copy::host_to_device, stream);
    }
    const std::size_t m = block->size();
    grow(n_ + m, obs_ && obs_->total_visibilities > 0 ? std::size_t(obs_->total_visibilities) : 0, stream);
    auto s = static_cast<cudaStream_t>(stream.native());
    append<<<blocks_of(append), 256, 0, s>>>(block->uu.data(), block->vv.data(), block->ww.data(),
                                             reinterpret_cast<const float2*>(block->vis.data()), block->weight.data(),
                                             std::int64_t(m), u_.data() + n_, v_.data() + n_, w_.data() + n_,
                                             reinterpret_cast<float2*>(c_.data()) + n_, stats_.data(), range_.data());
    device::check_launch("grid.wstack: append");
    n_ += m;
  }

  void finish(Context& ctx) override {
    if (!obs_) throw std::runtime_error("grid.wstack: no visibility block arrived");
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    double stats[2];
    unsigned range[2];
    device::copy(stats, stats_.data(), sizeof stats, device::Copy::device_to_host, stream);
    device::copy(range, range_.data(), sizeof range, device::Copy::device_to_host, stream);
    stream.synchronize();
    if (stats[1] > 0) throw InputError("grid.wstack: " + std::to_string(std::int64_t(stats[1])) + " visibilities have non-finite uvw");
    if (!(stats[0] > 0)) throw std::runtime_error("grid.wstack: the weights sum to 0: no visibility was gridded");
    float wlo, whi;
    std::memcpy(&wlo, &range[0], sizeof wlo);
    std::memcpy(&whi, &range[1], sizeof whi);
    const wstack::Engine& e = *engine_;
    const wstack::Planes pl = e.planes(wlo, whi);
    Array<double> taps, corr;
    const DevicePlan p = wstack::cuda::make_plan(e, pl, stream, taps, corr);
    // Sort by first plane so that each plane's kernel reads only the visibilities that touch it
    // (the counts come back with the run's second and last wait).
    const std::int64_t n = std::int64_t(n_);
    auto key_a = Array<std::int32_t>::device(n_, stream), key_b = Array<std::int32_t>::device(n_, stream);
    auto ord_a = Array<std::int32_t>::device(n_, stream), ord_b = Array<std::int32_t>::device(n_, stream);
    auto counts = Array<unsigned>::device(pl.count, stream);
    device::memset_zero(counts.data(), counts.bytes(), stream);
    first_planes<<<blocks_of(first_planes), 256, 0, s>>>(p, w_.data(), n, key_a.data(), ord_a.data(), counts.data());
    device::check_launch("grid.wstack: first_planes");
    cub::DoubleBuffer<std::int32_t> keys(key_a.data(), key_b.data()), order(ord_a.data(), ord_b.data());
    const int end_bit = std::max(1, int(std::bit_width(unsigned(pl.count))));
    std::size_t sort_bytes = 0;
    cuda_check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, order, n, 0, end_bit, s), "sort size");
    auto sort_temp = Array<std::uint8_t>::device(std::max<std::size_t>(sort_bytes, 1), stream);
    cuda_check(cub::DeviceRadixSort::SortPairs(sort_temp.data(), sort_bytes, keys, order, n, 0, end_bit, s), "sort");
    std::vector<unsigned> count(pl.count);
    device::copy(count.data(), counts.data(), counts.bytes(), device::Copy::device_to_host, stream);
    stream.synchronize();
    std::vector<std::int64_t> start(pl.count + 1, 0);
    for (int k = 0; k < pl.count; ++k) start[k + 1] = start[k] + count[k];

    const std::size_t cells = std::size_t(p.ng) * p.ng, pixels = std::size_t(p.n) * p.n;
    auto grid = Array<cfloat>::device(cells, stream);
    auto acc = Array<double>::device(pixels, stream);
    device::memset_zero(acc.data(), acc.bytes(), stream);
    plan_.ensure(p.ng);
    device::check_cufft(cufftSetStream(plan_.get(), s), kWho, "cufftSetStream");
    auto scratch = Array<std::uint8_t>::device(std::max<std::size_t>(plan_.work_bytes(), 1), stream);
    device::check_cufft(cufftSetWorkArea(plan_.get(), scratch.data()), kWho, "cufftSetWorkArea");
    auto* g = reinterpret_cast<float2*>(grid.data());
    const bool dbl = e.options().double_grid;
    auto dgrid = Array<double>::device(dbl ? 2 * cells : 0, stream);
    const auto* c = reinterpret_cast<const float2*>(c_.data());
    for (int plane = 0; plane < pl.count; ++plane) {
      const std::int64_t first = start[std::max(0, plane - p.support + 1)], count_p = start[std::min(plane, pl.count - p.support) + 1] - first;
      if (dbl) {
        device::memset_zero(dgrid.data(), dgrid.bytes(), stream);
        grid_plane<<<blocks_of(grid_plane<double>), 256, 0, s>>>(p, plane, u_.data(), v_.data(), w_.data(), c,
                                                                 order.Current(), first, count_p, dgrid.data());
        device::check_launch("grid.wstack: grid_plane");
        to_single<<<blocks_of(to_single), 256, 0, s>>>(dgrid.data(), std::int64_t(2 * cells), reinterpret_cast<float*>(g));
        device::check_launch("grid.wstack: to_single");
      } else {
        device::memset_zero(grid.data(), grid.bytes(), stream);
        grid_plane<<<blocks_of(grid_plane<float>), 256, 0, s>>>(p, plane, u_.data(), v_.data(), w_.data(), c,
                                                                order.Current(), first, count_p, reinterpret_cast<float*>(g));
        device::check_launch("grid.wstack: grid_plane");
      }
      auto* cg = reinterpret_cast<cufftComplex*>(g);
      device::check_cufft(cufftExecC2C(plan_.get(), cg, cg, CUFFT_FORWARD), kWho, "cufftExecC2C");
      accumulate<<<blocks_of(accumulate), 256, 0, s>>>(p, plane, g, acc.data());
      device::check_launch("grid.wstack: accumulate");
    }
    auto img = std::make_shared<Image>();
    img->nx = img->ny = p.n;
    img->pixels = Array<float>::device(pixels, stream);
    finalize<<<blocks_of(finalize), 256, 0, s>>>(p, acc.data(), stats_.data(), img->pixels.data());
    device::check_launch("grid.wstack: finalize");
    keep_until(stream.record(), {&key_a, &key_b, &ord_a, &ord_b, &counts, &sort_temp, &grid, &dgrid, &acc, &scratch, &taps, &corr, &u_, &v_, &w_, &c_, &stats_});
    img->wcs = sky_wcs(*obs_, e.options().cell_rad);
    const double W = p.support;
    ctx.add_work({.visibilities = double(n_), .updates = double(n_) * W * W * W});
    ctx.emit(image, img);
  }

 private:
  // Room for `need` visibilities (at least `hint`), keeping the ones staged (stream-ordered copies).
  void grow(std::size_t need, std::size_t hint, const device::Stream& stream) {
    if (need <= cap_) return;
    const std::size_t cap = std::max({need, hint, 2 * cap_});
    auto move = [&]<class T>(Array<T>& a) {
      auto b = Array<T>::device(cap, stream);
      if (n_) device::copy(b.data(), a.data(), n_ * sizeof(T), device::Copy::device_to_device, stream);
      keep_until(stream.record(), {&a});  // the old array is read by the copy just queued
      a = std::move(b);
    };
    move(u_), move(v_), move(w_), move(c_);
    cap_ = cap;
  }

  std::optional<wstack::Engine> engine_;
  std::shared_ptr<const Observation> obs_;
  Array<float> u_, v_, w_;
  Array<cfloat> c_;
  Array<double> stats_;
  Array<unsigned> range_;
  std::size_t n_ = 0, cap_ = 0;
  device::SquarePlan plan_{kWho};
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WStackGridderCuda>(); }

}  // namespace uvflow::grid_wstack
