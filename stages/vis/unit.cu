// vis.unit, cuda backend: the block's visibilities replaced by 1 + 0i on the device, every other
// array shared with the input block.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "runtime/cuda_check.hpp"
#include "stages/shared/vis_checks.hpp"
#include "stages/vis/unit.hpp"

namespace uvflow::vis_unit {
namespace {

constexpr int kThreads = 256;

__global__ void fill_one(float2* __restrict__ v, std::size_t n) {
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < n; k += std::size_t(gridDim.x) * blockDim.x)
    v[k] = make_float2(1.0f, 0.0f);
}

class UnitCuda : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(vis);
    check_arrays(*in);
    check_on_device(in->vis, "vis.unit (cuda): block " + std::to_string(in->index) + " vis");
    const device::Stream& s = ctx.stream();
    auto out = std::make_shared<VisBlock>(*in);  // shares every array but vis
    out->vis = Array<cfloat>::device(in->size(), s);
    if (in->size() > 0) {
      const unsigned blocks = unsigned(std::min<std::size_t>((in->size() + kThreads - 1) / kThreads, 4096));
      fill_one<<<blocks, kThreads, 0, static_cast<cudaStream_t>(s.native())>>>(
          reinterpret_cast<float2*>(out->vis.data()), in->size());
      device::check_launch("vis.unit: fill_one");
    }
    ctx.add_work({.visibilities = double(in->size())});
    ctx.emit(unit, out);
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<UnitCuda>(); }

}  // namespace uvflow::vis_unit
