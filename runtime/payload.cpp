#include "runtime/payload.hpp"

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

}  // namespace uvflow
