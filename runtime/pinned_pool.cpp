#include "runtime/pinned_pool.hpp"

#include <stdexcept>

#include "runtime/device.hpp"

namespace uvflow {

namespace {
constexpr std::size_t kAlign = 4096;  // page-aligned blocks: DMA-friendly, never shared by two arrays
std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

PinnedPool& PinnedPool::global() {
  static PinnedPool pool;
  return pool;
}

PinnedPool::~PinnedPool() {
  if (base_) device::free_pinned(base_);
}

void PinnedPool::reserve(std::size_t bytes) {
  std::lock_guard lk(m_);
  bytes = round_up(bytes);
  if (bytes <= size_) return;
  if (!used_.empty()) throw std::logic_error("the pinned reserve can only grow while none of it is in use");
  if (base_) device::free_pinned(base_);
  base_ = nullptr, size_ = 0;
  free_.clear();
  base_ = static_cast<char*>(device::alloc_pinned(bytes));
  size_ = bytes;
  free_[0] = bytes;
}

void* PinnedPool::allocate(std::size_t bytes) {
  std::lock_guard lk(m_);
  bytes = round_up(bytes ? bytes : 1);
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->second >= bytes) {  // first fit
      const std::size_t off = it->first, rest = it->second - bytes;
      free_.erase(it);
      if (rest) free_[off + bytes] = rest;
      used_[off] = bytes;
      return base_ + off;
    }
  return nullptr;
}

bool PinnedPool::release(void* p) {
  std::lock_guard lk(m_);
  if (!base_ || p < base_ || p >= base_ + size_) return false;
  const std::size_t off = std::size_t(static_cast<char*>(p) - base_);
  auto u = used_.find(off);
  if (u == used_.end()) throw std::logic_error("pinned reserve: release of a block it did not hand out");
  std::size_t start = off, len = u->second;
  used_.erase(u);
  // Coalesce with the free neighbours on both sides.
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == start + len) len += next->second, next = free_.erase(next);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) start = prev->first, len += prev->second, free_.erase(prev);
  }
  free_[start] = len;
  return true;
}

std::size_t PinnedPool::reserved() const {
  std::lock_guard lk(m_);
  return size_;
}

}  // namespace uvflow
