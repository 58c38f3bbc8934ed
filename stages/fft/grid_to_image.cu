// fft.grid_to_image, cuda backend: the cpu backend's steps, reordered to spare a pass over the
// grid. The norm is read back before any kernel runs (the stage's one wait for the device, once per
// run: a grid with nothing in it must stop the run, as on the cpu). The cpu backend scales by
// 1/norm and centres with (-1)^(u+v) before its FFT; centring before a transform of even size N
// moves its output by N/2 along each axis, and the scale commutes with it, so here cuFFT transforms
// the grid as it is, out of place (a C2C transform leaves its input as it was), and the crop reads
// the output N/2 further on, scales it and applies the second (-1)^(x+y). On el56-82's 18750^2 grid
// that drops one read and one write of 2.8 GB.
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

// Pixel (x, y) of the n x n image: the real part of the transform at the crop's offset plus the
// N/2 of the centring (mod N), times 1/norm and (-1)^(x+y).
__global__ void crop_real(const float2* buf, float inv, float* img, int N, int n) {
  const int off = (N - n) / 2 + N / 2;
  const std::int64_t total = std::int64_t(n) * n;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int x = int(i % n), y = int(i / n);
    const int X = x + off < N ? x + off : x + off - N, Y = y + off < N ? y + off : y + off - N;
    const float re = buf[std::int64_t(Y) * N + X].x * inv;
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
    const int blocks = device::resident_blocks(reinterpret_cast<const void*>(crop_real), threads);
    // cuFFT takes a non-const input pointer; a C2C transform out of place does not write to it.
    auto* grid_cells = const_cast<cufftComplex*>(reinterpret_cast<const cufftComplex*>(in->cells.data()));
    check_cufft(cufftExecC2C(plan_.get(), grid_cells, reinterpret_cast<cufftComplex*>(work.data()), CUFFT_FORWARD),
                "cufftExecC2C");
    auto img = std::make_shared<Image>();
    img->nx = img->ny = n;
    img->pixels = Array<float>::device(std::size_t(n) * n, stream);
    crop_real<<<blocks, threads, 0, s>>>(reinterpret_cast<const float2*>(work.data()), float(1.0 / norm),
                                         img->pixels.data(), N, n);
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
