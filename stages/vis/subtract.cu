// vis.subtract, cuda backend: data - model on device-resident blocks. The model's uu, vv and ww
// are compared with the data's on the device unless they are the same arrays (degrid.wproj's output
// shares its input block's), which needs one wait per block to read the answer.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "stages/vis/subtract.hpp"

namespace uvflow::vis_subtract {
namespace {

constexpr int kThreads = 256;

// r = a - b over 2n floats (n complex values).
__global__ void subtract_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ r,
                                std::size_t n) {
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < n; k += std::size_t(gridDim.x) * blockDim.x)
    r[k] = a[k] - b[k];
}

// The first k where a[k] != b[k] (as bits: the cpu backend's != on floats, NaN aside), into *first.
__global__ void first_difference(const std::uint32_t* __restrict__ a, const std::uint32_t* __restrict__ b, std::size_t n,
                                 unsigned long long* first) {
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < n; k += std::size_t(gridDim.x) * blockDim.x)
    if (a[k] != b[k]) atomicMin(first, static_cast<unsigned long long>(k));
}

unsigned blocks_for(std::size_t n) { return unsigned(std::min<std::size_t>((n + kThreads - 1) / kThreads, 4096)); }

class SubtractCuda : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto d = ctx.in(data);
    auto m = ctx.in(model);
    check_same_host_arrays(*d, *m);
    const std::string where = "vis.subtract (cuda): block " + std::to_string(d->index);
    check_on_device(d->vis, where + " data");
    check_on_device(m->vis, where + " model");
    const device::Stream& s = ctx.stream();
    auto stream = static_cast<cudaStream_t>(s.native());
    require_same(d->uu, m->uu, "uu", *d, s);
    require_same(d->vv, m->vv, "vv", *d, s);
    require_same(d->ww, m->ww, "ww", *d, s);
    auto out = std::make_shared<VisBlock>(*d);  // shares every array but vis
    out->vis = Array<cfloat>::device(d->size(), s);
    if (d->size() > 0) {
      const std::size_t n = 2 * d->size();
      subtract_kernel<<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<const float*>(d->vis.data()),
                                                              reinterpret_cast<const float*>(m->vis.data()),
                                                              reinterpret_cast<float*>(out->vis.data()), n);
      device::check_launch("vis.subtract: subtract_kernel");
    }
    ctx.add_work({.visibilities = double(d->size())});
    ctx.emit(residual, out);
  }

 private:
  // Throws unless `a` and `b` are the same array or hold the same values (both empty passes).
  void require_same(const Array<float>& a, const Array<float>& b, const char* name, const VisBlock& d,
                    const device::Stream& s) {
    if (a.empty() || b.empty() || a.storage() == b.storage()) return;
    check_on_device(a, "vis.subtract (cuda): data " + std::string(name));
    check_on_device(b, "vis.subtract (cuda): model " + std::string(name));
    if (first_.empty()) first_ = Array<unsigned long long>::device(1, s);
    auto stream = static_cast<cudaStream_t>(s.native());
    const unsigned long long none = ~0ull;  // every byte 0xff
    unsigned long long at = none;
    device::check(cudaMemsetAsync(first_.data(), 0xff, sizeof none, stream), "vis.subtract (cuda)", "reset");
    first_difference<<<blocks_for(a.size()), kThreads, 0, stream>>>(reinterpret_cast<const std::uint32_t*>(a.data()),
                                                                     reinterpret_cast<const std::uint32_t*>(b.data()),
                                                                     a.size(), first_.data());
    device::check_launch("vis.subtract: first_difference");
    device::check(cudaMemcpyAsync(&at, first_.data(), sizeof at, cudaMemcpyDeviceToHost, stream), "vis.subtract (cuda)",
                  "read back");
    s.synchronize();
    if (at != none)
      throw InputError("vis.subtract: block " + std::to_string(d.index) + ": visibility " + std::to_string(at) + " has another " +
                       name + " in model than in data: the model must be predicted for the same visibilities, in the same order");
  }

  Array<unsigned long long> first_;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<SubtractCuda>(); }

}  // namespace uvflow::vis_subtract
