#include "runtime/spill.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace uvflow {

void each_held_array(Payload& p, const std::function<void(ArrayBase&)>& f) {
  p.arrays(f);
  p.host_arrays(f);
}

SpillFile::SpillFile(const std::filesystem::path& dir) : dir_(dir) {
  std::string name = (dir / "uvflow-held-XXXXXX").string();
  fd_ = ::mkstemp(name.data());
  if (fd_ < 0)
    throw std::runtime_error("cannot make a scratch file in '" + dir.string() + "': " + std::strerror(errno) +
                             " (run.scratch_dir chooses the directory)");
  ::unlink(name.c_str());  // the space goes back when fd_ is closed, whatever ends the process
}

SpillFile::~SpillFile() {
  for (auto& e : staged_) e.synchronize();  // before the pinned halves go
  ::close(fd_);
}

std::size_t SpillFile::bytes() const {
  std::lock_guard lk(m_);
  return end_;
}

void SpillFile::write_at(const void* src, std::size_t offset, std::size_t bytes) {
  for (std::size_t done = 0; done < bytes;) {
    const ssize_t n = ::pwrite(fd_, static_cast<const char*>(src) + done, bytes - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error("writing " + std::to_string(bytes) + " bytes to the scratch file in '" + dir_.string() +
                               "' (" + std::to_string(this->bytes()) + " bytes held there): " +
                               (n < 0 ? std::strerror(errno) : "nothing written") +
                               " (run.scratch_dir chooses the directory, run.hold_memory_mb what stays in memory)");
    done += std::size_t(n);
  }
}

void SpillFile::stage_pinned() const {
  for (auto& h : staging_)
    if (!h) h = Storage::host(kStagingChunk, /*pinned=*/true);
}

std::shared_ptr<const SpillFile::Entry> SpillFile::write(const Payload& p) {
  auto e = std::make_shared<Entry>();
  std::size_t total = 0;
  each_held_array(const_cast<Payload&>(p), [&](ArrayBase& a) {
    e->parts.push_back({0, a.bytes(), a.size(), a.location(), bool(a.storage())});
    total += a.bytes();
  });
  std::size_t at;
  {
    std::lock_guard lk(m_);
    at = end_;
    end_ += total;
  }
  std::size_t k = 0;
  each_held_array(const_cast<Payload&>(p), [&](ArrayBase& a) {
    Entry::Part& part = e->parts[k++];
    part.offset = at;
    at += part.bytes;
    if (part.bytes == 0) return;
    if (part.location == Location::host) return write_at(a.storage()->data(), part.offset, part.bytes);
    // Device arrays come down through the pinned halves (as read() takes them up), after their
    // writer: each chunk is written to the file while the next one is copied down.
    std::lock_guard lk(staging_m_);
    stage_pinned();
    const device::Stream s = device::Stream::create();
    s.wait(a.storage()->last_writer());
    const std::size_t chunks = (part.bytes + kStagingChunk - 1) / kStagingChunk;
    auto down = [&](std::size_t c) {
      const std::size_t off = c * kStagingChunk, n = std::min(kStagingChunk, part.bytes - off);
      staged_[c & 1].synchronize();
      device::copy(staging_[c & 1]->data(), static_cast<const char*>(a.storage()->data()) + off, n,
                   device::Copy::device_to_host, s);
      staged_[c & 1] = s.record();
    };
    down(0);
    for (std::size_t c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) down(c + 1);
      staged_[c & 1].synchronize();
      const std::size_t off = c * kStagingChunk;
      write_at(staging_[c & 1]->data(), part.offset + off, std::min(kStagingChunk, part.bytes - off));
    }
  });
  auto shell = p.clone();
  each_held_array(*shell, [](ArrayBase& a) {
    a.s_.reset();
    a.n_ = 0;
  });
  e->shell = std::move(shell);
  return e;
}

void SpillFile::read_at(void* dst, std::size_t offset, std::size_t bytes) const {
  for (std::size_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(fd_, static_cast<char*>(dst) + done, bytes - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error("reading " + std::to_string(bytes) + " bytes back from the scratch file in '" +
                               dir_.string() + "': " + (n < 0 ? std::strerror(errno) : "the file ended early"));
    done += std::size_t(n);
  }
}

std::shared_ptr<Payload> SpillFile::read(const Entry& e) const {
  auto c = e.shell->clone();
  std::size_t k = 0;
  device::Stream s;
  each_held_array(*c, [&](ArrayBase& a) {
    const Entry::Part& part = e.parts.at(k++);
    if (!part.present) return;
    a.n_ = part.size;
    if (part.location == Location::host) {
      a.s_ = Storage::host(part.bytes);
      read_at(a.s_->data(), part.offset, part.bytes);
      return;
    }
    // Device arrays go up through the two pinned halves, each chunk read while the one before is
    // copied: through fresh pageable memory a block took about three times as long (page faults,
    // staged copies; bench/results/held_memory.md).
    std::lock_guard lk(staging_m_);
    if (!s.valid()) s = device::Stream::create();
    stage_pinned();
    a.s_ = Storage::device(part.bytes, s);
    int i = 0;
    for (std::size_t off = 0; off < part.bytes; off += kStagingChunk, i ^= 1) {
      const std::size_t n = std::min(kStagingChunk, part.bytes - off);
      staged_[i].synchronize();  // the half's last copy is done
      read_at(staging_[i]->data(), part.offset + off, n);
      device::copy(static_cast<char*>(a.s_->data()) + off, staging_[i]->data(), n, device::Copy::host_to_device, s);
      staged_[i] = s.record();
    }
    a.s_->set_last_writer(s.record());
  });
  return c;
}

}  // namespace uvflow
