#include "graph/held.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>

#include "runtime/dist.hpp"

namespace uvflow {

namespace {

std::size_t mb(std::int64_t n) { return std::size_t(n) << 20; }

}  // namespace

HoldBudget::HoldBudget(const RunOptions& run) {
  // By default half the node's memory, shared by the job's ranks on the node, and half the GPU's,
  // shared by the ranks on it (device::for_local_rank deals them out).
  const std::size_t host = std::size_t(::sysconf(_SC_PHYS_PAGES)) * std::size_t(::sysconf(_SC_PAGESIZE));
  const int gpus = device::count(), per_gpu = gpus > 0 ? (dist::local_size() + gpus - 1) / gpus : 1;
  limit_[int(Location::host)] = run.hold_memory_mb > 0 ? mb(run.hold_memory_mb) : host / 2 / std::size_t(dist::local_size());
  limit_[int(Location::device)] =
      run.hold_device_mb > 0 ? mb(run.hold_device_mb) : device::memory_bytes(device::current()) / 2 / std::size_t(per_gpu);
  const char* tmp = std::getenv("TMPDIR");
  scratch_dir_ = !run.scratch_dir.empty() ? run.scratch_dir : (tmp && *tmp ? tmp : "/tmp");
}

std::shared_ptr<const Payload> HeldItem::get() const {
  if (entry_) return file_->read(*entry_);
  if (upload_.empty()) return payload_;
  auto c = payload_->clone();
  const device::Stream s = device::Stream::create();
  std::size_t k = 0;
  // From pinned memory, asynchronously: the host copy lives as long as this item, which the graph
  // reading it holds until its device work is done.
  c->arrays([&](ArrayBase& a) {
    if (upload_.at(k++)) a.transfer(Location::device, s, /*pinned=*/true);
  });
  return c;
}

bool HoldBudget::first_time(const std::string& what) {
  std::lock_guard lk(said_m_);
  return said_.insert(what).second;
}

HeldItem HoldBudget::hold(std::shared_ptr<const Payload> p, Arity arity, HeldOutput& out, const std::string& what) {
  std::size_t bytes[2] = {0, 0};
  each_held_array(const_cast<Payload&>(*p), [&](ArrayBase& a) { bytes[int(a.location())] += a.bytes(); });
  auto take = [&](int l, std::size_t n) {
    std::size_t u = used_[l].load();
    do
      if (arity == Arity::stream && u + n > limit_[l]) return false;
    while (!used_[l].compare_exchange_weak(u, u + n));
    return true;
  };
  auto charge = [this](std::size_t host, std::size_t dev) {
    return std::shared_ptr<const void>(nullptr, [this, host, dev](const void*) {
      used_[0] -= host;
      used_[1] -= dev;
    });
  };
  auto budget = [&](int l) {
    return fmt::format("run.{} ({} MB, {:.3g} MB held)", l ? "hold_device_mb" : "hold_memory_mb", limit_[l] >> 20,
                       double(used_[l].load()) / 1e6);
  };
  HeldItem h;
  if (take(0, bytes[0])) {
    if (take(1, bytes[1])) {
      h.payload_ = std::move(p);
      h.charge_ = charge(bytes[0], bytes[1]);
      return h;
    }
    if (take(0, bytes[1])) {
      try {
        const device::Stream s = device::Stream::create();
        h.payload_ = p->moved_to(Location::host, s, /*pinned=*/true);
        s.synchronize();
        const_cast<Payload&>(*p).arrays([&](ArrayBase& a) { h.upload_.push_back(a.location() == Location::device); });
        h.charge_ = charge(bytes[0] + bytes[1], 0);
        if (first_time(what + " on the host"))
          spdlog::info("{}: an item's {:.3g} MB of device arrays do not fit {}: this item and any later one that does "
                       "not fit are held in host memory",
                       what, double(bytes[1]) / 1e6, budget(1));
        return h;
      } catch (const std::exception& e) {
        // Pinned memory is the scarcer kind: the scratch file takes the item instead.
        spdlog::warn("{}: could not hold an item's device arrays in pinned host memory ({}); it goes to the scratch file",
                     what, e.what());
        h = HeldItem();
        used_[0] -= bytes[1];
      }
    }
    used_[0] -= bytes[0];
  }
  if (!out.file) out.file = std::make_shared<SpillFile>(scratch_dir_);
  if (first_time(what + " in a file"))
    spdlog::info("{}: an item of {:.3g} MB does not fit {}{}: this item and any later one that does not fit go to a "
                 "scratch file in {}",
                 what, double(bytes[0] + bytes[1]) / 1e6, budget(0), bytes[1] ? " or " + budget(1) : std::string(),
                 scratch_dir_.string());
  h.entry_ = out.file->write(*p);
  h.file_ = out.file;
  return h;
}

}  // namespace uvflow
