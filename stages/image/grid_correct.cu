// image.grid_correct, cuda backend: the correction factors are evaluated on the device (the same
// host/device function as the cpu backend, stages/shared/spheroidal.hpp), then applied.
#include <cuda_runtime.h>

#include "runtime/cuda_check.hpp"
#include "stages/image/grid_correct.hpp"
#include "stages/shared/spheroidal.hpp"

namespace uvflow::image_grid_correct {
namespace {

// Table::kernel reads plane 0's support and its quarter row 0 from the device.
__global__ void correction_factors(double* corr, int n, int grid_size, int oversample, Table table,
                                   const std::int32_t* support, const cfloat* quarter) {
  const int off = (grid_size - n) / 2;
  const int support0 = support ? support[0] : 0;
  for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < n; x += gridDim.x * blockDim.x)
    corr[x] = factor(table, x + off, grid_size, oversample, support0,
                                   reinterpret_cast<const float*>(quarter));
}

__global__ void apply(const float* in, const double* corr, float* out, int n) {
  const std::int64_t total = std::int64_t(n) * n;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = float(in[i] * (corr[i / n] * corr[i % n]));
}

class GridCorrectCuda : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { table_ = table(p.table_correction); }

  void process(Context& ctx) override {
    auto in = ctx.in(in_image);
    auto ks = ctx.in(kernels);
    check_inputs(*in, *ks, Location::device, table_);
    const int n = ks->geom.image_size;
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    auto corr = Array<double>::device(n, stream);
    const bool kernel = table_ == Table::kernel;
    if (kernel) warn_if_beyond_horizon(ks->geom);
    correction_factors<<<(n + 255) / 256, 256, 0, s>>>(corr.data(), n, ks->geom.grid_size, ks->oversample, table_,
                                                      kernel ? ks->support.data() : nullptr,
                                                      kernel ? ks->quarter.data() : nullptr);
    device::check_launch("image.grid_correct: correction_factors");
    auto out = std::make_shared<Image>(*in);
    out->pixels = Array<float>::device(std::size_t(n) * n, stream);
    apply<<<device::resident_blocks(reinterpret_cast<const void*>(apply), 256), 256, 0, s>>>(
        in->pixels.data(), corr.data(), out->pixels.data(), n);
    device::check_launch("image.grid_correct: apply");
    corr.storage()->set_last_writer(stream.record());  // released after `apply` has read it
    ctx.emit(out_image, out);
  }

 private:
  Table table_ = Table::kernel;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<GridCorrectCuda>(); }

}  // namespace uvflow::image_grid_correct
