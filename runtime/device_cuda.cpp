// CUDA implementation of runtime/device.hpp (compiled only when uvflow is built with CUDA).
#include <cuda_runtime_api.h>

#include <oneapi/tbb/task_scheduler_observer.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/cuda_check.hpp"

namespace uvflow::device {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.native()); }

// Frees wait on this stream so that a release never blocks the host nor a worker's stream.
const Stream& release_stream() {
  static Stream s = Stream::create();
  return s;
}

}  // namespace

bool compiled() { return true; }

void prefer_eager_module_loading() { setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0); }

int count() {
  static const int n = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    if (c > 0) {
      // Keep freed pool memory for reuse instead of returning it to the driver each time.
      for (int d = 0; d < c; ++d) {
        cudaMemPool_t pool;
        if (cudaDeviceGetDefaultMemPool(&pool, d) == cudaSuccess) {
          uint64_t keep = UINT64_MAX;
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        }
      }
    }
    return c;
  }();
  return n;
}

namespace {

std::atomic<int> g_device{0};

// Sets the process's device on each thread that starts taking tasks in the observed arena.
class DeviceObserver : public tbb::task_scheduler_observer {
 public:
  DeviceObserver() { observe(true); }
  void on_scheduler_entry(bool) override { cudaSetDevice(g_device.load()); }
};

}  // namespace

void use(int dev) {
  if (dev < 0 || dev >= count())
    throw std::runtime_error("cuda:" + std::to_string(dev) + " asked for, " + std::to_string(count()) + " devices present");
  g_device = dev;
  check(cudaSetDevice(dev), "cudaSetDevice");
  // Made once, on the first caller's arena (the run's), and never destroyed: it must outlive every
  // task, and oneTBB may be gone before static destructors run.
  static DeviceObserver* observer = new DeviceObserver;
  (void)observer;
}

int current() { return g_device.load(); }

std::string describe(int dev) {
  if (count() <= dev) return "cuda:" + std::to_string(dev) + " (absent)";
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  return "cuda:" + std::to_string(dev) + " (" + p.name + ", sm_" + std::to_string(p.major) +
         std::to_string(p.minor) + ")";
}

std::size_t memory_bytes(int dev) {
  if (count() <= dev) return 0;
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  return p.totalGlobalMem;
}

void Event::synchronize() const {
  if (h_) check(cudaEventSynchronize(static_cast<cudaEvent_t>(native())), "cudaEventSynchronize");
}

bool Event::ready() const {
  if (!h_) return true;
  cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(native()));
  if (e == cudaErrorNotReady) return false;
  check(e, "cudaEventQuery");
  return true;
}

float Event::elapsed_since(const Event& start) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.native()),
                             static_cast<cudaEvent_t>(native())),
        "cudaEventElapsedTime");
  return ms;
}

void* Event::native() const { return h_.get(); }

Stream Stream::create() {
  if (count() == 0) throw std::runtime_error("no CUDA device is available");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  Stream st;
  st.h_ = std::shared_ptr<void>(s, [](void* p) { cudaStreamDestroy(static_cast<cudaStream_t>(p)); });
  return st;
}

Event Stream::record(bool timing) const {
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreate");
  check(cudaEventRecord(e, raw(*this)), "cudaEventRecord");
  Event ev;
  ev.h_ = std::shared_ptr<void>(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  return ev;
}

void Stream::wait(const Event& e) const {
  if (e.valid())
    check(cudaStreamWaitEvent(raw(*this), static_cast<cudaEvent_t>(e.native()), 0),
          "cudaStreamWaitEvent");
}

void Stream::synchronize() const { check(cudaStreamSynchronize(raw(*this)), "cudaStreamSynchronize"); }

void* Stream::native() const { return h_.get(); }

void* alloc(std::size_t bytes, const Stream& s) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, raw(s));
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("CUDA out of memory allocating " + std::to_string(bytes) + " bytes (" +
                             cudaGetErrorString(e) + ")");
  }
  return p;
}

void release(void* p, const Event* after, std::size_t n_after) {
  if (!p) return;
  const Stream& rs = release_stream();
  for (std::size_t i = 0; i < n_after; ++i) rs.wait(after[i]);
  // Ignore errors here: this runs from destructors, possibly while a failed run unwinds.
  cudaFreeAsync(p, raw(rs));
}

void* alloc_pinned(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost");
  return p;
}

void free_pinned(void* p) { cudaFreeHost(p); }

void copy(void* dst, const void* src, std::size_t bytes, Copy kind, const Stream& s) {
  if (bytes == 0) return;
  cudaMemcpyKind k = kind == Copy::host_to_device   ? cudaMemcpyHostToDevice
                     : kind == Copy::device_to_host ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  check(cudaMemcpyAsync(dst, src, bytes, k, raw(s)), "cudaMemcpyAsync");
}

void memset_zero(void* p, std::size_t bytes, const Stream& s) {
  if (bytes) check(cudaMemsetAsync(p, 0, bytes, raw(s)), "cudaMemsetAsync");
}

void reserve_pool(std::size_t bytes) {
  if (bytes == 0) return;
  const Stream s = Stream::create();
  void* p = alloc(bytes, s);
  check(cudaFreeAsync(p, raw(s)), "cudaFreeAsync");
  s.synchronize();  // the pool keeps the memory: its release threshold is unlimited (count())
}

void check_launch(const char* what) { check(cudaGetLastError(), what); }

void check(cudaError_t e, const char* who, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(who) + ": " + what + ": " + cudaGetErrorString(e));
}

int multiprocessors() {
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  return sms;
}

int resident_blocks(const void* kernel, int threads, std::size_t dynamic_shm) {
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dynamic_shm),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return std::max(1, multiprocessors() * per_sm);
}

}  // namespace uvflow::device
