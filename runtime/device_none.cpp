// runtime/device.hpp for builds without CUDA: no device exists, and asking for one says why.
#include <stdexcept>

#include "runtime/device.hpp"

namespace uvflow::device {
namespace {
[[noreturn]] void absent() {
  throw std::runtime_error("uvflow was built without CUDA: the cuda backend is not available");
}
}  // namespace

bool compiled() { return false; }

void prefer_eager_module_loading() {}
int count() { return 0; }
std::size_t memory_bytes(int) { return 0; }
std::string describe(int dev) { return "cuda:" + std::to_string(dev) + " (not compiled)"; }
void use(int dev) { throw std::runtime_error("cuda:" + std::to_string(dev) + " asked for: uvflow was built without CUDA"); }
int current() { return 0; }
void Event::synchronize() const {}
bool Event::ready() const { return true; }
float Event::elapsed_since(const Event&) const { absent(); }
void* Event::native() const { return nullptr; }
Stream Stream::create() { absent(); }
Event Stream::record(bool) const { absent(); }
void Stream::wait(const Event&) const { absent(); }
void Stream::synchronize() const {}
void* Stream::native() const { return nullptr; }
void* alloc(std::size_t, const Stream&) { absent(); }
void release(void*, const Event*, std::size_t) {}
void* alloc_pinned(std::size_t) { absent(); }
void free_pinned(void*) {}
void copy(void*, const void*, std::size_t, Copy, const Stream&) { absent(); }
void memset_zero(void*, std::size_t, const Stream&) { absent(); }
void reserve_pool(std::size_t) { absent(); }
void check_launch(const char*) {}

}  // namespace uvflow::device
