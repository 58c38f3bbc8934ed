// image.column_gain, cuda backend: the cpu backend's float products on device-resident frames. The
// gains (Gains, as on the cpu) are uploaded once per frame width and kept.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "runtime/payloads/image.hpp"
#include "stages/image/column_gain.hpp"

namespace uvflow::image_column_gain {
namespace {

constexpr int kThreads = 256;

// Rows over blockIdx.y, columns over x: one gain load per pixel, from L1.
__global__ void apply_gains(const float* __restrict__ in, const float* __restrict__ gains, float* __restrict__ out,
                            int nx, int ny) {
  for (int y = blockIdx.y; y < ny; y += gridDim.y)
    for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < nx; x += gridDim.x * blockDim.x)
      out[std::size_t(y) * nx + x] = in[std::size_t(y) * nx + x] * gains[x];
}

class ColumnGainCuda : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { gains_.configure(p); }
  void prepare(PrepareContext&) override { gains_.load(); }

  void process(Context& ctx) override {
    auto in = ctx.in(in_frame);
    check_frame(*in);
    check_on_device(in->pixels, "image.column_gain (cuda): frame " + std::to_string(in->index));
    const device::Stream& stream = ctx.stream();
    auto out = std::make_shared<Image>(*in);
    out->pixels = Array<float>::device(in->pixels.size(), stream);
    // Items may come concurrently (the stage is parallel): the cached gains and the event that
    // keeps them alive change under the lock, and the launch is enqueued under it too, so that the
    // last event recorded follows every launch that reads them.
    std::lock_guard lk(m_);
    if (width_ != in->nx) {
      const std::vector<float> g = gains_.of_frame(in->nx, in->index);
      device_gains_ = Array<float>::host(g.size());
      std::copy(g.begin(), g.end(), device_gains_.data());
      device_gains_.transfer(Location::device, stream, false);
      width_ = in->nx;
    }
    const dim3 grid(unsigned(std::min((in->nx + kThreads - 1) / kThreads, 64)), unsigned(std::min(in->ny, 65535)));
    apply_gains<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream.native())>>>(
        in->pixels.data(), device_gains_.data(), out->pixels.data(), in->nx, in->ny);
    device::check_launch("image.column_gain: apply_gains");
    device_gains_.storage()->set_last_writer(stream.record());  // freed after the last frame read them
    ctx.emit(out_frame, out);
  }

 private:
  Gains gains_;
  std::mutex m_;
  int width_ = -1;
  Array<float> device_gains_;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<ColumnGainCuda>(); }

}  // namespace uvflow::image_column_gain
