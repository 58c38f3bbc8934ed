// A reserve of pinned (page-locked) host memory. Pinning is slow (about 0.4 s for the 900 MB of a
// 15000^2 image on the H100 machine), and a download needs its pinned buffer only once its size is
// known, in the middle of a run. A pipeline that sets run.pinned_pool_mb reserves that much before
// its streams start; pinned host allocations are then served from the reserve when they fit, and
// from the driver otherwise.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

namespace uvflow {

class PinnedPool {
 public:
  static PinnedPool& global();
  // Grows the reserve to at least `bytes` (nothing when it is that large already). Throws when
  // no CUDA device can pin the memory.
  void reserve(std::size_t bytes);
  // A block of at least `bytes` from the reserve, or nullptr when none is free.
  void* allocate(std::size_t bytes);
  // Returns `p` to the reserve; false when `p` did not come from it.
  bool release(void* p);
  std::size_t reserved() const;

 private:
  PinnedPool() = default;
  ~PinnedPool();
  mutable std::mutex m_;
  char* base_ = nullptr;
  std::size_t size_ = 0;
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes, coalesced
  std::map<std::size_t, std::size_t> used_;  // offset -> bytes
};

}  // namespace uvflow
