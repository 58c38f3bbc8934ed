// For the CUDA sources that use cuFFT: one form for cuFFT errors, and a plan
// that owns its handle and never allocates its own work area (cuFFT would
// cudaMalloc one, which waits for the whole device; callers set one from the
// stream-ordered pool with cufftSetWorkArea).
#pragma once

#include <cufft.h>

#include <stdexcept>
#include <string>

namespace uvflow::device {

// Throws std::runtime_error("<who>: cuFFT error <n> in <what>") unless `r` is
// CUFFT_SUCCESS.
inline void check_cufft(cufftResult r, const char *who, const char *what) {
  if (r != CUFFT_SUCCESS)
    throw std::runtime_error(std::string(who) + ": cuFFT error " +
                             std::to_string(int(r)) + " in " + what);
}

class FftPlan {
public:
  explicit FftPlan(const char *who) {
    check_cufft(cufftCreate(&h_), who, "cufftCreate");
    if (const cufftResult r = cufftSetAutoAllocation(h_, 0);
        r != CUFFT_SUCCESS) {
      cufftDestroy(h_);
      check_cufft(r, who, "cufftSetAutoAllocation");
    }
  }
  ~FftPlan() { cufftDestroy(h_); }
  FftPlan(const FftPlan &) = delete;
  FftPlan &operator=(const FftPlan &) = delete;
  cufftHandle get() const { return h_; }

private:
  cufftHandle h_{};
};

} // namespace uvflow::device
