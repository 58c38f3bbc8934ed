// Reference-counted storage with a location. Device storage carries the event of its last
// writer (consumers make their stream wait on it, never on the whole device) and the events of
// its readers (the memory is released only after they complete).
#pragma once

#include <cassert>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/device.hpp"

namespace uvflow {

using cfloat = std::complex<float>;
using cdouble = std::complex<double>;

enum class Location : std::uint8_t { host, device };
const char* to_string(Location l);

class Storage {
 public:
  // Host memory, 64-byte aligned and uninitialised; `pinned` pages it in for async copies.
  static std::shared_ptr<Storage> host(std::size_t bytes, bool pinned = false);
  // Device memory from the stream-ordered pool, usable on `s` at once.
  static std::shared_ptr<Storage> device(std::size_t bytes, const device::Stream& s);
  // Memory that someone else owns (a NumPy or CuPy array handed in by a program embedding uvflow):
  // used in place, never freed here; `owner` is dropped when the storage is, after the device work
  // that reads or writes it has completed.
  static std::shared_ptr<Storage> external(void* p, std::size_t bytes, Location loc, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return p_; }
  std::size_t bytes() const { return bytes_; }
  Location location() const { return loc_; }
  bool pinned() const { return pinned_; }

  device::Event last_writer() const;
  void set_last_writer(device::Event e);
  void add_reader(device::Event e);

 private:
  Storage(void* p, std::size_t bytes, Location loc, bool pinned)
      : p_(p), bytes_(bytes), loc_(loc), pinned_(pinned) {}
  void* p_;
  std::size_t bytes_;
  Location loc_;
  bool pinned_;
  mutable std::mutex m_;
  device::Event writer_;
  std::vector<device::Event> readers_;
  std::shared_ptr<void> owner_;  // external memory: its owner; null: ours
};

// The untyped part of an Array: what transfers and event stamping need.
class ArrayBase {
 public:
  const std::shared_ptr<Storage>& storage() const { return s_; }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  std::size_t bytes() const { return s_ ? s_->bytes() : 0; }
  Location location() const { return s_ ? s_->location() : Location::host; }
  // Replace the storage by a same-sized copy at `to` (enqueued on `s`). A host source must outlive
  // the copy (pinned memory is read asynchronously): the caller keeps it, as the executor keeps a
  // stage's inputs until its work is done.
  void transfer(Location to, const device::Stream& s, bool pinned);

 protected:
  friend class SpillFile;  // empties arrays it has written and fills them when it reads them back

  std::shared_ptr<Storage> s_;
  std::size_t n_ = 0;
};

// For cuda backends: throws std::logic_error("<what> is in host memory, ...") unless `a` is in
// device memory (the planner inserts the transfers, so this is a wiring error, not bad data).
inline void check_on_device(const ArrayBase& a, const std::string& what) {
  if (a.location() != Location::device)
    throw std::logic_error(what + " is in host memory, the cuda backend reads device memory");
}

// Device scratch that work ending at `done` uses: each array's memory is not released (for reuse)
// before `done`, however soon the array itself is dropped.
inline void keep_until(const device::Event& done, std::initializer_list<const ArrayBase*> arrays) {
  for (const ArrayBase* a : arrays)
    if (a->storage()) a->storage()->set_last_writer(done);
}

// A typed, sized, located array of trivially copyable T. Copies share the storage.
template <class T>
class Array : public ArrayBase {
 public:
  Array() = default;
  static Array host(std::size_t n, bool pinned = false) {
    Array a;
    a.s_ = Storage::host(n * sizeof(T), pinned);
    a.n_ = n;
    return a;
  }
  static Array device(std::size_t n, const device::Stream& s) {
    Array a;
    a.s_ = Storage::device(n * sizeof(T), s);
    a.n_ = n;
    return a;
  }
  // `n` elements at `p`, owned by `owner` (Storage::external): no copy.
  static Array external(T* p, std::size_t n, Location loc, std::shared_ptr<void> owner) {
    Array a;
    a.s_ = Storage::external(p, n * sizeof(T), loc, std::move(owner));
    a.n_ = n;
    return a;
  }
  // A host array holding a copy of `v`.
  static Array from(const std::vector<T>& v) {
    Array a = host(v.size());
    std::copy(v.begin(), v.end(), a.data());
    return a;
  }
  // A same-located array of the same size (a fresh buffer).
  Array like(const device::Stream* s = nullptr) const {
    return location() == Location::host ? host(n_, s_ && s_->pinned()) : device(n_, *s);
  }

  T* data() const { return s_ ? static_cast<T*>(s_->data()) : nullptr; }
  // Host access; a device array here is a bug in the caller.
  T& operator[](std::size_t i) const {
    assert(location() == Location::host && i < n_);
    return data()[i];
  }
  T* begin() const { return host_data(); }
  T* end() const { return host_data() + n_; }
  T* host_data() const {
    if (location() != Location::host) throw std::logic_error("host access to a device array");
    return data();
  }
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }
};

}  // namespace uvflow
