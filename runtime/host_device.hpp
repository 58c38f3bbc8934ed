// UVFLOW_HD marks small functions that both the C++ and the CUDA backends call, so one
// implementation serves both (placement, kernel indexing, grid correction).
#pragma once

#if defined(__CUDACC__)
#define UVFLOW_HD __host__ __device__
#else
#define UVFLOW_HD
#endif
