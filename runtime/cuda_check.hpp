// For the CUDA sources only (the stages' .cu files and runtime/device_cuda.cpp): one form for CUDA
// errors, and the launch size that fills the device. Public headers stay free of CUDA.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace uvflow::device {

// Throws std::runtime_error("<who>: <what>: <CUDA's error string>") unless `e` is cudaSuccess;
// `who` names the stage and backend, e.g. "grid.tiled (cuda)".
void check(cudaError_t e, const char* who, const char* what);

// Streaming multiprocessors of the current device.
int multiprocessors();

// Thread blocks of `kernel` at `threads` threads and `dynamic_shm` bytes that the current device
// holds at once (occupancy per SM x SMs): the grid size of a kernel that loops over its work.
int resident_blocks(const void* kernel, int threads, std::size_t dynamic_shm = 0);

}  // namespace uvflow::device
