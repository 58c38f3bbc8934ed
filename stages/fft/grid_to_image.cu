// fft.grid_to_image, cuda backend: the same steps as the cpu backend on the device-resident grid.
// The norm is read back before any kernel runs (the stage's one wait for the device, once per run:
// a grid with nothing in it must stop the run, as on the cpu); then scale by 1/norm and centre with
// (-1)^(u+v) into a work copy, cuFFT forward in place, and keep the real part of the central crop
// with the second (-1)^(x+y).
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/cufft_plan.hpp"
#include "stages/fft/grid_to_image.hpp"

namespace uvflow::fft_grid_to_image {
namespace {

constexpr char kWho[] = "fft.grid_to_image (cuda)";

void check_cufft(cufftResult r, const char* what) { device::check_cufft(r, kWho, what); }

__global__ void scale_and_centre(const float2* cells, float inv, float2* out, int N) {
  const std::int64_t n = std::int64_t(N) * N;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int u = int(i % N), v = int(i / N);
    const float s = ((u + v) & 1) ? -inv : inv;
    const float2 c = cells[i];
    out[i] = make_float2(c.x * s, c.y * s);
  }
}

__global__ void crop_real(const float2* buf, float* img, int N, int n) {
  const int off = (N - n) / 2;
  const std::int64_t total = std::int64_t(n) * n;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int x = int(i % n), y = int(i / n);
    const float re = buf[std::int64_t(y + off) * N + x + off].x;
    img[i] = ((x + y) & 1) ? -re : re;
  }
}

class GridToImageCuda : public DeclaredStage<decl> {
 public:
  // The plan is made here when the grid's size was described, else at the grid.
  void prepare(PrepareContext& pc) override {
    if (const auto& g = pc.input(grid).grid; g && !pc.dry_run) plan_.ensure(g->grid_size);
  }

  void process(Context& ctx) override {
    auto in = ctx.in(grid);
    check_grid(*in, Location::device);
    const int N = in->geom.grid_size, n = in->geom.image_size;
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    plan_.ensure(N);  // host work: before the wait below, so that it overlaps the gridding
    check_cufft(cufftSetStream(plan_.get(), s), "cufftSetStream");
    // The work area comes from the stream-ordered pool (device::FftPlan allocates none).
    auto scratch = Array<std::uint8_t>::device(std::max<std::size_t>(plan_.work_bytes(), 1), stream);
    check_cufft(cufftSetWorkArea(plan_.get(), scratch.data()), "cufftSetWorkArea");
    auto work = Array<cfloat>::device(std::size_t(N) * N, stream);
    double norm = 0;
    device::copy(&norm, in->totals.data(), sizeof norm, device::Copy::device_to_host, stream);
    stream.synchronize();
    check_norm(norm);
    const int threads = 256;
    const int blocks = device::resident_blocks(reinterpret_cast<const void*>(scale_and_centre), threads);
    scale_and_centre<<<blocks, threads, 0, s>>>(reinterpret_cast<const float2*>(in->cells.data()), float(1.0 / norm),
                                                reinterpret_cast<float2*>(work.data()), N);
    device::check_launch("fft.grid_to_image: scale_and_centre");
    auto* w = reinterpret_cast<cufftComplex*>(work.data());
    check_cufft(cufftExecC2C(plan_.get(), w, w, CUFFT_FORWARD), "cufftExecC2C");
    auto img = std::make_shared<Image>();
    img->nx = img->ny = n;
    img->pixels = Array<float>::device(std::size_t(n) * n, stream);
    crop_real<<<blocks, threads, 0, s>>>(reinterpret_cast<const float2*>(work.data()), img->pixels.data(), N, n);
    device::check_launch("fft.grid_to_image: crop_real");
    keep_until(stream.record(), {&work, &scratch});  // released after the crop has read them
    img->wcs = sky_of(*in);
    ctx.emit(image, img);
  }

 private:
  device::SquarePlan plan_{kWho};
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<GridToImageCuda>(); }

}  // namespace uvflow::fft_grid_to_image
