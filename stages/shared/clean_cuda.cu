// Hogbom and Clark CLEAN on the device (minor_cycle_cuda.cuh): the peak search, the PSF subtraction,
// and Clark's FFT subtraction of a cycle's components.
#include <cuComplex.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cufft_plan.hpp"
#include "stages/shared/minor_cycle_cuda.cuh"

namespace uvflow::clean {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

// A pixel's |value| and index; `abs` -1: none (an empty mask).
struct Peak {
  float abs;
  unsigned long long at;
  float value;
};

// hogbom()'s rule: the larger |value|; of equal ones, the lower index.
__device__ bool better(const Peak& a, const Peak& b) { return a.abs > b.abs || (a.abs == b.abs && a.at < b.at); }

// The block's best of its threads' (each the best of its grid-stride pixels, scanned in increasing
// index with `>`, so the first of equal ones stays), by a tree reduction in shared memory.
__device__ void reduce_block(Peak mine, Peak* out) {
  __shared__ Peak shared[kThreads];
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half && better(shared[threadIdx.x + half], shared[threadIdx.x]))
      shared[threadIdx.x] = shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = shared[0];
}

__global__ void block_peaks(const float* r, const std::uint8_t* mask, unsigned long long n, Peak* partial) {
  Peak best{-1.0f, 0, 0.0f};
  for (unsigned long long k = blockIdx.x * (unsigned long long)kThreads + threadIdx.x; k < n;
       k += (unsigned long long)gridDim.x * kThreads)
    if (mask[k] && fabsf(r[k]) > best.abs) best = {fabsf(r[k]), k, r[k]};
  reduce_block(best, &partial[blockIdx.x]);
}

// One block: the best of the blocks' peaks.
__global__ void final_peak(const Peak* partial, int blocks, Peak* out) {
  Peak best{-1.0f, 0, 0.0f};
  for (int b = threadIdx.x; b < blocks; b += kThreads)
    if (better(partial[b], best)) best = partial[b];
  reduce_block(best, out);
}

// residual -= flux x the PSF centred on (x, y), over the overlap [x_lo, x_hi) x [y_lo, y_hi); one
// thread also adds the component to the model.
__global__ void subtract(float* r, float* model, int nx, const float* psf, int pnx, int x, int y, int pcx, int pcy, int x_lo,
                         int x_hi, int y_lo, int y_hi, float flux) {
  const int w = x_hi - x_lo;
  const long long total = (long long)w * (y_hi - y_lo);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int ix = x_lo + int(i % w), iy = y_lo + int(i / w);
    float& v = r[std::size_t(iy) * std::size_t(nx) + std::size_t(ix)];
    v = fmaf(-flux, psf[std::size_t(iy - y + pcy) * std::size_t(pnx) + std::size_t(ix - x + pcx)], v);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) model[std::size_t(y) * std::size_t(nx) + std::size_t(x)] += flux;
}

// The largest |psf| outside the (2 patch + 1)^2 patch around the centre, as the bits of a
// non-negative float (which order as the floats do): exact whatever the order.
__global__ void sidelobe_max(const float* psf, int pnx, int pny, int patch, unsigned int* out) {
  const int pcx = pnx / 2, pcy = pny / 2;
  unsigned int best = 0;
  const long long total = (long long)pnx * pny;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int x = int(i % pnx), y = int(i / pnx);
    // NaN left out, as clark()'s std::max leaves it out.
    if ((abs(x - pcx) > patch || abs(y - pcy) > patch) && !isnan(psf[i])) best = max(best, __float_as_uint(fabsf(psf[i])));
  }
  atomicMax(out, best);
}

// The PSF's (2 patch + 1)^2 patch around its centre, 0 beyond the PSF.
__global__ void gather_patch(const float* psf, int pnx, int pny, int patch, float* out) {
  const int w = 2 * patch + 1;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < w * w; i += gridDim.x * blockDim.x) {
    const int x = i % w - patch + pnx / 2, y = i / w - patch + pny / 2;
    out[i] = x < 0 || y < 0 || x >= pnx || y >= pny ? 0.0f : psf[std::size_t(y) * std::size_t(pnx) + std::size_t(x)];
  }
}

// clark()'s circular kernel: element (x, y) of the 2nx x 2ny grid holds the PSF at offset (dx, dy),
// dx = x or x - 2nx, 0 beyond the PSF.
__global__ void circular_kernel(const float* psf, int pnx, int pny, int nx, int ny, cuFloatComplex* kernel) {
  const int mx = 2 * nx, my = 2 * ny;
  const long long total = (long long)mx * my;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int x = int(i % mx), y = int(i / mx);
    const int px = (x < nx ? x : x - mx) + pnx / 2, py = (y < ny ? y : y - my) + pny / 2;
    const float v = px < 0 || py < 0 || px >= pnx || py >= pny ? 0.0f : psf[std::size_t(py) * std::size_t(pnx) + std::size_t(px)];
    kernel[i] = make_cuFloatComplex(v, 0.0f);
  }
}

// A cycle's components, in their order (so that repeated pixels sum as clark() sums them): into the
// model and onto the zeroed 2nx x 2ny work grid.
__global__ void place_components(const unsigned long long* at, const float* flux, int count, int nx, float* model,
                                 cuFloatComplex* work) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int i = 0; i < count; ++i) {
    const unsigned long long k = at[i];
    model[k] += flux[i];
    const std::size_t w = std::size_t(k / nx) * std::size_t(2 * nx) + std::size_t(k % nx);
    work[w].x += flux[i];
  }
}

__global__ void multiply(cuFloatComplex* work, const cuFloatComplex* kernel, long long m) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m; i += (long long)gridDim.x * blockDim.x)
    work[i] = cuCmulf(work[i], kernel[i]);
}

// residual -= the real part of the inverse transform, scaled, over the image's corner of the grid.
__global__ void subtract_convolved(float* residual, const cuFloatComplex* work, int nx, int ny, float scale) {
  const long long total = (long long)nx * ny;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    const int x = int(i % nx), y = int(i / nx);
    residual[i] -= work[std::size_t(y) * std::size_t(2 * nx) + std::size_t(x)].x * scale;
  }
}

// The peak of |residual| within the mask, as hogbom() finds it.
Peak find_peak(const float* residual, const std::uint8_t* mask, unsigned long long n, const Array<Peak>& partial, int blocks,
               cudaStream_t s, const device::Stream& stream) {
  block_peaks<<<blocks, kThreads, 0, s>>>(residual, mask, n, partial.data());
  device::check_launch("deconv (cuda): block_peaks");
  final_peak<<<1, kThreads, 0, s>>>(partial.data(), blocks, partial.data() + blocks);
  device::check_launch("deconv (cuda): final_peak");
  Peak pk;
  device::check(cudaMemcpyAsync(&pk, partial.data() + blocks, sizeof pk, cudaMemcpyDeviceToHost, s), "deconv (cuda)",
                "read the peak");
  stream.synchronize();
  return pk;
}

int grid_blocks(long long work) { return int(std::clamp<long long>((work + kThreads - 1) / kThreads, 1, 4 * kMaxBlocks)); }

}  // namespace

MinorCycle hogbom_cuda(float* residual, float* model, int nx, int ny, const float* psf, int pnx, int pny, double p0,
                       const std::uint8_t* mask, double gain, std::int64_t niter, double threshold,
                       const std::function<bool()>& cancelled, const device::Stream& stream) {
  auto s = static_cast<cudaStream_t>(stream.native());
  const unsigned long long n = (unsigned long long)nx * (unsigned long long)ny;
  const int blocks = int(std::min<unsigned long long>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  auto partial = Array<Peak>::device(std::size_t(blocks) + 1, stream);  // the last: the result
  const int pcx = pnx / 2, pcy = pny / 2;
  MinorCycle out;
  double cleaned = 0;
  out.stop = "niter";
  for (;;) {
    const Peak pk = find_peak(residual, mask, n, partial, blocks, s, stream);
    if (minor_cycle_done(out, pk.abs, threshold, niter, cancelled)) break;
    const int x = int(pk.at % (unsigned long long)nx), y = int(pk.at / (unsigned long long)nx);
    const double peak = pk.value;
    const float flux = float(gain * peak / p0);
    cleaned += flux;
    out.components.push_back({x, y, flux, peak, cleaned});
    const int x_lo = std::max(0, x - pcx), x_hi = std::min(nx, x - pcx + pnx);
    const int y_lo = std::max(0, y - pcy), y_hi = std::min(ny, y - pcy + pny);
    subtract<<<grid_blocks((long long)(x_hi - x_lo) * (y_hi - y_lo)), kThreads, 0, s>>>(residual, model, nx, psf, pnx, x, y, pcx, pcy, x_lo, x_hi, y_lo, y_hi, flux);
    device::check_launch("deconv (cuda): subtract");
  }
  keep_until(stream.record(), {&partial});
  return out;
}

MinorCycle clark_cuda(float* residual, float* model, int nx, int ny, const float* psf, int pnx, int pny, double p0,
                      const std::uint8_t* mask, const std::vector<std::uint8_t>& host_mask, double gain, std::int64_t niter,
                      double threshold, int psf_patch, double cycle_factor, const std::string& where,
                      const std::function<bool()>& cancelled, const device::Stream& stream) {
  const char* who = "deconv.clark (cuda)";
  auto s = static_cast<cudaStream_t>(stream.native());
  const unsigned long long n = (unsigned long long)nx * (unsigned long long)ny;
  const int blocks = int(std::min<unsigned long long>(kMaxBlocks, (n + kThreads - 1) / kThreads));
  auto partial = Array<Peak>::device(std::size_t(blocks) + 1, stream);
  // The largest sidelobe outside the patch, and the patch itself for the host's patch cycles.
  auto bits = Array<unsigned int>::device(1, stream);
  const int w = 2 * psf_patch + 1;
  auto patch_dev = Array<float>::device(std::size_t(w) * std::size_t(w), stream);
  device::check(cudaMemsetAsync(bits.data(), 0, sizeof(unsigned int), s), who, "reset");
  sidelobe_max<<<grid_blocks((long long)pnx * pny), kThreads, 0, s>>>(psf, pnx, pny, psf_patch, bits.data());
  device::check_launch("deconv.clark: sidelobe_max");
  gather_patch<<<grid_blocks((long long)w * w), kThreads, 0, s>>>(psf, pnx, pny, psf_patch, patch_dev.data());
  device::check_launch("deconv.clark: gather_patch");
  unsigned int sidelobe_bits = 0;
  std::vector<float> patch(std::size_t(w) * std::size_t(w));
  device::check(cudaMemcpyAsync(&sidelobe_bits, bits.data(), sizeof sidelobe_bits, cudaMemcpyDeviceToHost, s), who, "read back");
  device::check(cudaMemcpyAsync(patch.data(), patch_dev.data(), patch.size() * sizeof(float), cudaMemcpyDeviceToHost, s), who,
                "read back");
  stream.synchronize();
  float largest;
  std::memcpy(&largest, &sidelobe_bits, sizeof largest);
  const double sidelobe = double(largest) / p0;  // = clark()'s max of |psf| / p0: the division is monotonic
  if (sidelobe >= 1)
    throw InputError(where + ": the PSF reaches " + std::to_string(sidelobe) + " of its centre outside the " +
                     std::to_string(w) + "-pixel patch: give a larger psf_patch");

  // The whole PSF as a circular 2nx x 2ny kernel, transformed once (clark()'s exact FFT convolution).
  const int mx = 2 * nx, my = 2 * ny;
  const long long m = (long long)mx * my;
  auto kernel = Array<cuFloatComplex>::device(std::size_t(m), stream), work = Array<cuFloatComplex>::device(std::size_t(m), stream);
  device::FftPlan plan(who);
  std::size_t work_bytes = 0;
  device::check_cufft(cufftMakePlan2d(plan.get(), my, mx, CUFFT_C2C, &work_bytes), who, "cufftMakePlan2d");
  auto scratch = Array<char>::device(std::max<std::size_t>(work_bytes, 1), stream);
  device::check_cufft(cufftSetStream(plan.get(), s), who, "cufftSetStream");
  device::check_cufft(cufftSetWorkArea(plan.get(), scratch.data()), who, "cufftSetWorkArea");
  circular_kernel<<<grid_blocks(m), kThreads, 0, s>>>(psf, pnx, pny, nx, ny, kernel.data());
  device::check_launch("deconv.clark: circular_kernel");
  device::check_cufft(cufftExecC2C(plan.get(), kernel.data(), kernel.data(), CUFFT_FORWARD), who, "cufftExecC2C");

  MinorCycle out;
  out.stop = "niter";
  double cleaned = 0;
  std::vector<float> res(n);
  std::vector<std::size_t> at;
  std::vector<float> fluxes;
  auto at_dev = Array<unsigned long long>::device(0, stream);
  auto flux_dev = Array<float>::device(0, stream);
  for (;;) {
    const Peak pk = find_peak(residual, mask, n, partial, blocks, s, stream);
    const float peak = pk.abs;
    if (minor_cycle_done(out, peak, threshold, niter, cancelled)) break;
    // The cycle's pixels and its patch cycle on the host, by clark()'s own code (the pixels above the
    // limit are few); the residual read back once per cycle for it.
    const double limit = clark_limit(threshold, cycle_factor, sidelobe, peak);
    device::check(cudaMemcpyAsync(res.data(), residual, n * sizeof(float), cudaMemcpyDeviceToHost, s), who, "read the residual");
    stream.synchronize();
    clark_cycle(res.data(), host_mask, nx, limit, sidelobe, gain, p0, niter, patch, psf_patch, out, cleaned, at, fluxes);
    // The cycle's components, convolved with the whole PSF on the device, off the whole residual.
    if (at_dev.size() < at.size()) {
      at_dev = Array<unsigned long long>::device(at.size(), stream);
      flux_dev = Array<float>::device(at.size(), stream);
    }
    static_assert(sizeof(std::size_t) == sizeof(unsigned long long));
    device::check(cudaMemcpyAsync(at_dev.data(), at.data(), at.size() * sizeof(unsigned long long), cudaMemcpyHostToDevice, s), who,
                  "upload the components");
    device::check(cudaMemcpyAsync(flux_dev.data(), fluxes.data(), fluxes.size() * sizeof(float), cudaMemcpyHostToDevice, s), who,
                  "upload the components");
    device::check(cudaMemsetAsync(work.data(), 0, std::size_t(m) * sizeof(cuFloatComplex), s), who, "zero the work grid");
    place_components<<<1, 1, 0, s>>>(at_dev.data(), flux_dev.data(), int(at.size()), nx, model, work.data());
    device::check_launch("deconv.clark: place_components");
    device::check_cufft(cufftExecC2C(plan.get(), work.data(), work.data(), CUFFT_FORWARD), who, "cufftExecC2C");
    multiply<<<grid_blocks(m), kThreads, 0, s>>>(work.data(), kernel.data(), m);
    device::check_launch("deconv.clark: multiply");
    device::check_cufft(cufftExecC2C(plan.get(), work.data(), work.data(), CUFFT_INVERSE), who, "cufftExecC2C");
    subtract_convolved<<<grid_blocks((long long)n), kThreads, 0, s>>>(residual, work.data(), nx, ny, 1.0f / float(m));
    device::check_launch("deconv.clark: subtract_convolved");
    stream.synchronize();  // the host's component lists are reused next cycle
  }
  keep_until(stream.record(), {&partial, &bits, &patch_dev, &kernel, &work, &scratch, &at_dev, &flux_dev});
  return out;
}

}  // namespace uvflow::clean
