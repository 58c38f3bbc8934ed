#include "runtime/payload.hpp"

#include <set>

namespace uvflow {

Location Payload::location() const {
  Location loc = Location::host;
  const_cast<Payload*>(this)->arrays([&](ArrayBase& a) {
    if (a.storage() && a.location() == Location::device) loc = Location::device;
  });
  return loc;
}

std::size_t Payload::bytes() const {
  std::size_t n = 0;
  const_cast<Payload*>(this)->arrays([&](ArrayBase& a) { n += a.bytes(); });
  return n;
}

std::shared_ptr<Payload> Payload::moved_to(Location to, const device::Stream& s, bool pinned) const {
  auto c = clone();
  c->arrays([&](ArrayBase& a) { a.transfer(to, s, pinned); });
  return c;
}

bool has_device_array(const Payload& p) {
  bool any = false;
  const_cast<Payload&>(p).arrays([&](ArrayBase& a) { any |= a.storage() && a.location() == Location::device; });
  return any;
}

void wait_for_device_input(const Payload& input, const device::Stream& s) {
  const_cast<Payload&>(input).arrays([&](ArrayBase& a) {
    if (a.storage() && a.location() == Location::device) s.wait(a.storage()->last_writer());
  });
}

void stamp_device_use(const std::vector<const Payload*>& inputs, const std::vector<const Payload*>& outputs,
                      const device::Event& done) {
  std::set<const Storage*> read;
  for (const Payload* p : inputs)
    const_cast<Payload&>(*p).arrays([&](ArrayBase& a) {
      if (a.storage() && a.location() == Location::device && read.insert(a.storage().get()).second)
        a.storage()->add_reader(done);
    });
  for (const Payload* p : outputs)
    const_cast<Payload&>(*p).arrays([&](ArrayBase& a) {
      if (a.storage() && a.location() == Location::device && !read.count(a.storage().get()))
        a.storage()->set_last_writer(done);
    });
}

}  // namespace uvflow
