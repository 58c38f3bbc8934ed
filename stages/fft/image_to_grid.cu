// fft.image_to_grid, cuda backend: the cpu backend's steps on the device-resident model image, so
// the prediction chain (image.grid_correct -> fft.image_to_grid -> degrid.wproj) stays on the
// device. The image goes into the middle of a zeroed grid with (-1)^(x+y), cuFFT transforms the
// whole grid backward (unnormalised, as FFTW_BACKWARD; the cpu backend skips the zero columns,
// which changes nothing), and (-1)^(u+v) is applied again.
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <memory>

#include "runtime/cuda_check.hpp"
#include "runtime/cufft_plan.hpp"
#include "stages/fft/image_to_grid.hpp"

namespace uvflow::fft_image_to_grid {
namespace {

constexpr char kWho[] = "fft.image_to_grid (cuda)";

void check_cufft(cufftResult r, const char* what) { device::check_cufft(r, kWho, what); }

__global__ void pad_and_centre(const float* pixels, float2* cells, int N, int n) {
  const int off = (N - n) / 2;
  const std::int64_t total = std::int64_t(n) * n;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int x = int(i % n), y = int(i / n);
    const float p = pixels[i];
    cells[std::int64_t(y + off) * N + x + off] = make_float2(((x + y) & 1) ? -p : p, 0);
  }
}

__global__ void alternate_signs(float2* cells, int N) {
  const std::int64_t total = std::int64_t(N) * N;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    if (((i % N) + (i / N)) & 1) {
      const float2 c = cells[i];
      cells[i] = make_float2(-c.x, -c.y);
    }
  }
}

class ImageToGridCuda : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto img = ctx.in(image);
    auto ks = ctx.in(kernels);
    check_model(*img, *ks);
    check_on_device(img->pixels, "the model image");
    const int N = ks->geom.grid_size, n = img->nx;
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    plan_.ensure(N);
    check_cufft(cufftSetStream(plan_.get(), s), "cufftSetStream");
    // The work area comes from the stream-ordered pool (device::FftPlan allocates none).
    auto scratch = Array<std::uint8_t>::device(std::max<std::size_t>(plan_.work_bytes(), 1), stream);
    check_cufft(cufftSetWorkArea(plan_.get(), scratch.data()), "cufftSetWorkArea");

    auto out = std::make_shared<Grid>();
    out->geom = ks->geom;
    out->cells = Array<cfloat>::device(std::size_t(N) * N, stream);
    out->totals = Array<double>::device(3, stream);  // norm 0, nothing gridded
    device::memset_zero(out->cells.data(), out->cells.bytes(), stream);
    device::memset_zero(out->totals.data(), out->totals.bytes(), stream);
    auto* cells = reinterpret_cast<float2*>(out->cells.data());
    const int threads = 256;
    const int blocks = device::resident_blocks(reinterpret_cast<const void*>(alternate_signs), threads);
    pad_and_centre<<<blocks, threads, 0, s>>>(img->pixels.data(), cells, N, n);
    device::check_launch("fft.image_to_grid: pad_and_centre");
    auto* c = reinterpret_cast<cufftComplex*>(cells);
    check_cufft(cufftExecC2C(plan_.get(), c, c, CUFFT_INVERSE), "cufftExecC2C");
    alternate_signs<<<blocks, threads, 0, s>>>(cells, N);
    device::check_launch("fft.image_to_grid: alternate_signs");
    keep_until(stream.record(), {&scratch});  // released after the transform has used it
    ctx.emit(grid, out);
  }

 private:
  device::SquarePlan plan_{kWho};
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<ImageToGridCuda>(); }

}  // namespace uvflow::fft_image_to_grid
