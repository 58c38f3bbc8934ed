#include "graph/held.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>

namespace uvflow {

namespace {

std::size_t mb(std::int64_t n) { return std::size_t(n) << 20; }

}  // namespace

HoldBudget::HoldBudget(const RunOptions& run) {
  const std::size_t host = std::size_t(::sysconf(_SC_PHYS_PAGES)) * std::size_t(::sysconf(_SC_PAGESIZE));
  limit_[int(Location::host)] = run.hold_memory_mb > 0 ? mb(run.hold_memory_mb) : host / 2;
  limit_[int(Location::device)] =
      run.hold_device_mb > 0 ? mb(run.hold_device_mb) : device::memory_bytes(device::current()) / 2;
  const char* tmp = std::getenv("TMPDIR");
  scratch_dir_ = !run.scratch_dir.empty() ? run.scratch_dir : (tmp && *tmp ? tmp : "/tmp");
}

HeldItem HoldBudget::hold(std::shared_ptr<const Payload> p, Arity arity, std::shared_ptr<SpillFile>& file,
                          const std::string& what) {
  std::size_t bytes[2] = {0, 0};
  each_held_array(const_cast<Payload&>(*p), [&](ArrayBase& a) { bytes[int(a.location())] += a.bytes(); });
  // Takes both shares, or neither.
  auto take = [&](int l) {
    std::size_t u = used_[l].load();
    do
      if (arity == Arity::stream && u + bytes[l] > limit_[l]) return false;
    while (!used_[l].compare_exchange_weak(u, u + bytes[l]));
    return true;
  };
  HeldItem h;
  const bool host_fits = take(0), device_fits = host_fits && take(1);
  if (host_fits) {
    if (device_fits) {
      h.payload_ = std::move(p);
      h.charge_ = std::shared_ptr<const void>(nullptr, [this, bytes](const void*) {
        used_[0] -= bytes[0];
        used_[1] -= bytes[1];
      });
      return h;
    }
    used_[0] -= bytes[0];
  }
  if (!file) {
    file = std::make_shared<SpillFile>(scratch_dir_);
    const int l = host_fits ? 1 : 0;
    spdlog::info("{}: an item of {:.3g} MB would take the {} memory held past run.{} ({} MB, {:.3g} MB held): "
                 "this item and any later one that does not fit go to a scratch file in {}",
                 what, double(bytes[l]) / 1e6, l ? "device" : "host", l ? "hold_device_mb" : "hold_memory_mb",
                 limit_[l] >> 20, double(used_[l].load()) / 1e6, scratch_dir_.string());
  }
  h.entry_ = file->write(*p);
  h.file_ = file;
  return h;
}

}  // namespace uvflow
