// A scratch file for payloads held beyond a memory budget (a loop's data between its cycles,
// graph/plan_runner): made in a directory and unlinked at once, so that its space is given back
// when it is closed, however the process ends, and no file is left behind. Payloads are appended
// (the bytes of every array, device arrays copied to the host first) and read back by position,
// from any thread.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/payload.hpp"

namespace uvflow {

class SpillFile {
 public:
  // A payload in the file: the payload with its arrays emptied, and where each array's bytes are.
  struct Entry {
    struct Part {
      std::size_t offset = 0, bytes = 0, size = 0;  // size: the array's element count
      Location location = Location::host;
      bool present = false;  // the array had storage
    };
    std::shared_ptr<const Payload> shell;
    std::vector<Part> parts;  // in the order of arrays(), then host_arrays()
  };

  // Throws std::runtime_error naming `dir` when no file can be made there.
  explicit SpillFile(const std::filesystem::path& dir);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  // Appends `p` (its device arrays after the device work that writes them, through the staging
  // halves; device writes and reads of one file take turns). Throws
  // std::runtime_error naming the directory when the file cannot take it (a full disk).
  std::shared_ptr<const Entry> write(const Payload& p);
  // A copy of the payload written as `e`, each array where it was: device arrays are copied back
  // to the device on a stream of their own, the copy their last writer (consumers wait on it);
  // device reads of one file take turns.
  std::shared_ptr<Payload> read(const Entry& e) const;

  std::size_t bytes() const;  // written so far
  const std::filesystem::path& dir() const { return dir_; }

 private:
  void write_at(const void* src, std::size_t offset, std::size_t bytes);
  void read_at(void* dst, std::size_t offset, std::size_t bytes) const;
  void stage_pinned() const;  // makes the staging halves (staging_m_ held)

  std::filesystem::path dir_;
  int fd_ = -1;
  mutable std::mutex m_;  // end_
  std::size_t end_ = 0;
  // Pinned staging for device arrays: two halves, each the source or target of the copy recorded
  // in staged_ (made on the first device array written or read).
  static constexpr std::size_t kStagingChunk = std::size_t(16) << 20;
  mutable std::mutex staging_m_;
  mutable std::shared_ptr<Storage> staging_[2];
  mutable device::Event staged_[2];
};

// Every array `p` holds: arrays(), then host_arrays().
void each_held_array(Payload& p, const std::function<void(ArrayBase&)>& f);

}  // namespace uvflow
