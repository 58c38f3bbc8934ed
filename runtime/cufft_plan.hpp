// For the CUDA sources that use cuFFT: one form for cuFFT errors, and a plan
// that owns its handle and never allocates its own work area (cuFFT would
// cudaMalloc one, which waits for the whole device; callers set one from the
// stream-ordered pool with cufftSetWorkArea).
#pragma once

#include <cufft.h>

#include <cstddef>
#include <memory>
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

// An N x N complex-to-complex plan, remade only when N changes; a failed make
// leaves no plan of another size behind. Its work area is the caller's
// (work_bytes() of it, from the stream-ordered pool).
class SquarePlan {
public:
  explicit SquarePlan(const char *who) : who_(who) {}
  void ensure(int n) {
    if (n == n_)
      return;
    plan_.reset();
    n_ = 0;
    auto plan = std::make_unique<FftPlan>(who_);
    check_cufft(cufftMakePlan2d(plan->get(), n, n, CUFFT_C2C, &work_bytes_),
                who_, "cufftMakePlan2d");
    plan_ = std::move(plan);
    n_ = n;
  }
  cufftHandle get() const { return plan_->get(); }
  std::size_t work_bytes() const { return work_bytes_; }

private:
  const char *who_;
  std::unique_ptr<FftPlan> plan_;
  int n_ = 0;
  std::size_t work_bytes_ = 0;
};

} // namespace uvflow::device
