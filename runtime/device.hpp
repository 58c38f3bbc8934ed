// The device layer: CUDA streams, events and memory behind a small C++ interface, so that code
// compiled without CUDA (and machines without a GPU) see the same types. In a CPU-only build every
// call that would need a GPU throws a clear error; `device::count()` is 0.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace uvflow::device {

bool compiled();                 // uvflow was built with CUDA
// Asks CUDA to load every kernel's module when the device is first used (CUDA_MODULE_LOADING=EAGER)
// unless the environment already says how: lazy loading, CUDA's default, put 30-60 ms of
// host-blocking loads into the first blocks' stages of a run on the H100
// (bench/results/h100_sort_chain.md). Call before anything in the process uses CUDA (the command's
// main and the Python module's import do); later it has no effect.
void prefer_eager_module_loading();
int count();                     // usable CUDA devices (0 without CUDA or without a GPU)
std::string describe(int dev);   // "cuda:0 (NVIDIA H100 80GB HBM3, sm_90)"
std::size_t memory_bytes(int dev); // the device's global memory; 0 where there is no such device
// One rank per GPU: the device of the process that is `local_rank` on its node (dist::local_rank()),
// round robin over the node's count() devices.
inline int for_local_rank(int local_rank, int devices) { return devices > 0 ? local_rank % devices : 0; }
// Makes `dev` the process's device: the calling thread's now, and every oneTBB worker's as it enters
// the calling thread's arena (CUDA's current device is per thread), so streams, memory and kernels
// of every stage land on it. Throws when there is no such device.
void use(int dev);
int current();  // the device use() chose; 0 before

// A recorded point in a stream's work. Copies share the same CUDA event.
class Event {
 public:
  Event() = default;  // null event: nothing to wait for
  bool valid() const { return bool(h_); }
  void synchronize() const;  // block the calling thread until the event completes
  bool ready() const;
  // Milliseconds between `start` and this event (both completed).
  float elapsed_since(const Event& start) const;
  void* native() const;  // cudaEvent_t

 private:
  friend class Stream;
  std::shared_ptr<void> h_;
};

// An in-order queue of device work. Copies share the same CUDA stream.
class Stream {
 public:
  Stream() = default;
  static Stream create();       // a new non-blocking stream on the current device
  bool valid() const { return bool(h_); }
  Event record(bool timing = false) const;  // record a new event now
  void wait(const Event& e) const;           // later work on this stream waits for e (no host wait)
  void synchronize() const;
  void* native() const;  // cudaStream_t

 private:
  std::shared_ptr<void> h_;
};

enum class Copy { host_to_device, device_to_host, device_to_device };

// Stream-ordered device allocation from the device's memory pool.
void* alloc(std::size_t bytes, const Stream& s);
// Free `p` once every event in `after` has completed; never blocks the host.
void release(void* p, const Event* after, std::size_t n_after);
void* alloc_pinned(std::size_t bytes);
void free_pinned(void* p);
void copy(void* dst, const void* src, std::size_t bytes, Copy kind, const Stream& s);
void memset_zero(void* p, std::size_t bytes, const Stream& s);
// Grows the device's stream-ordered memory pool to hold at least `bytes` (allocates and frees
// them once): later allocations up to that size map no new memory, which takes milliseconds
// per gigabyte and would otherwise land in the middle of a run.
void reserve_pool(std::size_t bytes);
// Throws with `what` when the last kernel launch failed (call after every launch).
void check_launch(const char* what);

}  // namespace uvflow::device
