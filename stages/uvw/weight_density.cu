// uvw.weight_density, cuda backend: one thread per visibility (grid-stride), a double atomicAdd
// on its cell of the weighting grid; the totals are reduced per thread block, then added once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "stages/shared/weighting.hpp"
#include "stages/uvw/weight_density.hpp"

namespace uvflow::uvw_weight_density {
namespace {

constexpr int kThreads = 256;

// Sums a per-thread value over the thread block; thread 0 adds it to *out.
__device__ void block_add(double mine, double* out) {
  __shared__ double part[kThreads];
  part[threadIdx.x] = mine;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0 && part[0] != 0) atomicAdd(out, part[0]);
}

__global__ void __launch_bounds__(kThreads)
    accumulate(const WeightGridGeometry g, std::int64_t n, const float* uu, const float* vv, const float* weight,
               double* cells, double* totals, unsigned long long* rejected) {
  double sum = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(kThreads) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * kThreads) {
    const double u = uu[i], v = vv[i], w = weight[i];
    if (!(isfinite(u) && isfinite(v) && isfinite(w) && w >= 0)) {
      atomicAdd(rejected, 1ULL);
      continue;
    }
    const std::int64_t k = weight_cell(g, u, v);
    if (k < 0) continue;
    atomicAdd(cells + k, w);
    sum += w;
  }
  block_add(sum, totals);
}

__global__ void __launch_bounds__(kThreads) sum_of_squares(const double* cells, std::int64_t n, double* out) {
  double sum = 0;
  for (std::int64_t k = blockIdx.x * std::int64_t(kThreads) + threadIdx.x; k < n; k += std::int64_t(gridDim.x) * kThreads)
    sum += cells[k] * cells[k];
  block_add(sum, out);
}

class WeightDensityCuda final : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override {
    if (pc.dry_run) return;
    max_blocks_ = device::resident_blocks(reinterpret_cast<const void*>(accumulate), kThreads);
  }

  void process(Context& ctx) override {
    auto vis = ctx.in(uvw_weight_density::vis);
    weighting::check_block(*vis, Location::device);
    const device::Stream& stream = ctx.stream();
    if (!density_) {
      allocate_density(*ctx.in(kernels), stream);
      density_->obs = vis->obs;
    }
    const std::int64_t n = std::int64_t(vis->size());
    if (n > 0) {
      accumulate<<<blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream.native())>>>(
          density_->geom, n, vis->uu.data(), vis->vv.data(), vis->weight.data(), density_->cells.data(),
          density_->totals.data(), rejected_.data());
      device::check_launch("uvw.weight_density: accumulate launch");
      rejected_.storage()->set_last_writer(stream.record());  // freed only after this kernel
    }
    ctx.add_work({.visibilities = double(n)});
  }

  void finish(Context& ctx) override {
    const device::Stream& stream = ctx.stream();
    if (!density_) allocate_density(*ctx.in(kernels), stream);
    const std::int64_t n = std::int64_t(density_->cells.size());
    sum_of_squares<<<blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream.native())>>>(
        density_->cells.data(), n, density_->totals.data() + 1);
    device::check_launch("uvw.weight_density: sum_of_squares launch");
    // The one synchronisation of the stage: invalid input must stop the run, as on the cpu.
    unsigned long long rejected = 0;
    device::copy(&rejected, rejected_.data(), sizeof rejected, device::Copy::device_to_host, stream);
    stream.synchronize();
    if (rejected)
      throw InputError(std::to_string(rejected) + " visibilities have a non-finite uv or weight or a negative weight");
    ctx.emit(density, std::move(density_));
  }

 private:
  void allocate_density(const KernelStack& ks, const device::Stream& stream) {
    density_ = std::make_shared<WeightDensity>();
    density_->geom = weighting::weight_grid(ks, params().padding);
    density_->cells = Array<double>::device(std::size_t(density_->geom.cells()), stream);
    device::memset_zero(density_->cells.data(), density_->cells.bytes(), stream);
    density_->totals = Array<double>::device(2, stream);
    device::memset_zero(density_->totals.data(), density_->totals.bytes(), stream);
    rejected_ = Array<unsigned long long>::device(1, stream);
    device::memset_zero(rejected_.data(), rejected_.bytes(), stream);
  }
  unsigned blocks(std::int64_t n) const {
    return unsigned(std::min<std::int64_t>((n + kThreads - 1) / kThreads, max_blocks_));
  }

  int max_blocks_ = 1;
  std::shared_ptr<WeightDensity> density_;
  Array<unsigned long long> rejected_;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WeightDensityCuda>(); }

}  // namespace uvflow::uvw_weight_density
