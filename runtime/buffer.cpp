#include "runtime/buffer.hpp"

#include "runtime/pinned_pool.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/error.hpp"

namespace uvflow {

const char* to_string(Location l) { return l == Location::host ? "host" : "device"; }

std::shared_ptr<Storage> Storage::host(std::size_t bytes, bool pinned) {
  void* p;
  if (pinned) {
    p = PinnedPool::global().allocate(bytes);
    if (!p) p = device::alloc_pinned(bytes);
  } else {
    p = std::aligned_alloc(64, ((bytes + 63) / 64) * 64 + 64);
    if (!p) throw OutOfMemory(bytes, "a host array");
  }
  return std::shared_ptr<Storage>(new Storage(p, bytes, Location::host, pinned));
}

std::shared_ptr<Storage> Storage::device(std::size_t bytes, const device::Stream& s) {
  void* p = device::alloc(bytes, s);
  auto st = std::shared_ptr<Storage>(new Storage(p, bytes, Location::device, false));
  st->writer_ = s.record();  // the allocation is ordered on `s`
  return st;
}

std::shared_ptr<Storage> Storage::external(void* p, std::size_t bytes, Location loc, std::shared_ptr<void> owner) {
  auto st = std::shared_ptr<Storage>(new Storage(p, bytes, loc, false));
  st->owner_ = std::move(owner);
  return st;
}

Storage::~Storage() {
  if (owner_) {
    // The owner may free the memory at once: the device work on it must be over first.
    if (writer_.valid()) writer_.synchronize();
    for (auto& e : readers_) e.synchronize();
  } else if (loc_ == Location::device) {
    std::vector<device::Event> after = readers_;
    if (writer_.valid()) after.push_back(writer_);
    device::release(p_, after.data(), after.size());
  } else if (pinned_) {
    if (!PinnedPool::global().release(p_)) device::free_pinned(p_);
  } else {
    std::free(p_);
  }
}

device::Event Storage::last_writer() const {
  std::lock_guard lk(m_);
  return writer_;
}

void Storage::set_last_writer(device::Event e) {
  std::lock_guard lk(m_);
  writer_ = std::move(e);
  readers_.clear();  // the writer was ordered after them
}

void Storage::add_reader(device::Event e) {
  std::lock_guard lk(m_);
  readers_.push_back(std::move(e));
}

void ArrayBase::transfer(Location to, const device::Stream& s, bool pinned) {
  if (!s_ || s_->location() == to) return;
  std::shared_ptr<Storage> dst;
  if (to == Location::device) {
    dst = Storage::device(s_->bytes(), s);
    device::copy(dst->data(), s_->data(), s_->bytes(), device::Copy::host_to_device, s);
    dst->set_last_writer(s.record());  // the copy, not just the allocation
  } else {
    dst = Storage::host(s_->bytes(), pinned);
    s.wait(s_->last_writer());
    device::copy(dst->data(), s_->data(), s_->bytes(), device::Copy::device_to_host, s);
    s_->add_reader(s.record());  // the device memory outlives the copy even if this was its last owner
  }
  s_ = std::move(dst);
}

}  // namespace uvflow
