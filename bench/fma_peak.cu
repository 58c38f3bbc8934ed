// The H100's sustained FP32 FMA rate, against which the gridding tables' ceiling is checked: every thread runs
// 8 independent FMA chains for `iterations` steps (no memory traffic in the loop), on enough blocks
// to fill every SM; CUDA events time the kernel, best of 5. Prints FMA/s and complex kernel-point
// updates/s (4 FMAs each). Built as build/bench/fma_peak (CUDA builds).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

constexpr int kChains = 8, kThreads = 256;

__global__ void fma_chains(float* out, int iterations, float a, float b) {
  float x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = threadIdx.x + c;
  for (int i = 0; i < iterations; ++i)
#pragma unroll
    for (int c = 0; c < kChains; ++c) x[c] = fmaf(x[c], a, b);
  float s = 0;
  for (int c = 0; c < kChains; ++c) s += x[c];
  if (s == 12345.0f) out[0] = s;  // keeps the chains live; never true in practice
}

int main() {
  int sms = 0, per_sm = 0, clock_khz = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fma_chains, kThreads, 0);
  const int blocks = sms * per_sm * 4, iterations = 1 << 16;
  float* out = nullptr;
  cudaMalloc(&out, sizeof(float));
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  fma_chains<<<blocks, kThreads>>>(out, iterations, 0.999f, 0.001f);  // warm-up
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(t0);
    fma_chains<<<blocks, kThreads>>>(out, iterations, 0.999f, 0.001f);
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    best = std::min(best, ms);
  }
  if (cudaGetLastError() != cudaSuccess) {
    std::printf("CUDA error\n");
    return 1;
  }
  const double fma = double(blocks) * kThreads * iterations * kChains / (best * 1e-3);
  std::printf("%d SMs, %d blocks of %d threads, reported clock %.0f MHz: %.3e FMA/s (%.1f TFLOP/s), "
              "%.3e complex updates/s; theoretical 128 FMA/clock/SM: %.3e FMA/s\n",
              sms, blocks, kThreads, clock_khz / 1e3, fma, 2 * fma / 1e12, fma / 4, 128.0 * sms * clock_khz * 1e3);
  return 0;
}
