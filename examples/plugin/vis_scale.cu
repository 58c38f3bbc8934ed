// example.vis_scale, cuda backend: a grid-stride kernel on the stage's own stream. Nothing waits
// for it here: the executor stamps the emitted arrays with the stream's event, and whoever reads
// them next (a later stage, the transfer back to the host) is ordered after it.
#include <cuda_runtime.h>

#include "runtime/buffer.hpp"
#include "vis_scale.hpp"

namespace vis_scale {
namespace {

__global__ void scale(const float2* __restrict__ in, float2* __restrict__ out, float f, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = make_float2(f * in[i].x, f * in[i].y);
}

class VisScaleCuda : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(in_vis);
    check_on_device(in->vis, "example.vis_scale (cuda): block " + std::to_string(in->index));
    const device::Stream& stream = ctx.stream();
    auto out = std::make_shared<VisBlock>(*in);
    out->vis = Array<cfloat>::device(in->size(), stream);
    if (const std::size_t n = in->size()) {
      const unsigned blocks = unsigned(std::min<std::size_t>((n + 255) / 256, 4096));
      scale<<<blocks, 256, 0, static_cast<cudaStream_t>(stream.native())>>>(
          reinterpret_cast<const float2*>(in->vis.data()), reinterpret_cast<float2*>(out->vis.data()),
          float(params().factor), n);
      device::check_launch("example.vis_scale: scale");
    }
    ctx.add_work({.visibilities = double(in->size())});
    ctx.emit(out_vis, out);
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<VisScaleCuda>(); }

}  // namespace vis_scale
