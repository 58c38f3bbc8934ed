#include "runtime/output_files.hpp"

#include <unistd.h>

#include <stdexcept>

namespace uvflow {

std::filesystem::path OutputFiles::temp_for(const std::filesystem::path& final_path) {
  std::filesystem::path f = final_path;
  if (f.has_parent_path()) std::filesystem::create_directories(f.parent_path());
  auto tmp = f.parent_path() / ("." + f.filename().string() + "." + tag_ + "-" + std::to_string(getpid()) + ".tmp");
  std::lock_guard lk(m_);
  for (auto& [t, fin] : files_)
    if (fin == f) throw std::runtime_error("two outputs are written to " + f.string());
  files_.emplace_back(tmp, f);
  return tmp;
}

std::vector<std::filesystem::path> OutputFiles::commit() {
  std::lock_guard lk(m_);
  std::vector<std::filesystem::path> done;
  for (auto& [tmp, fin] : files_) {
    std::error_code ec;
    // rename() replaces a file but not a directory (a Measurement Set): move the old one aside,
    // and delete it once the new one is in place.
    std::filesystem::path old;
    if (std::filesystem::is_directory(tmp) && std::filesystem::exists(fin)) {
      old = tmp.string() + ".old";
      std::filesystem::rename(fin, old, ec);
      if (ec) throw std::runtime_error("cannot move " + fin.string() + " aside to replace it: " + ec.message());
    }
    std::filesystem::rename(tmp, fin, ec);
    if (ec) throw std::runtime_error("cannot move " + tmp.string() + " to " + fin.string() + ": " + ec.message());
    if (!old.empty()) std::filesystem::remove_all(old, ec);
    done.push_back(fin);
  }
  files_.clear();
  return done;
}

void OutputFiles::rollback() {
  std::lock_guard lk(m_);
  for (auto& [tmp, fin] : files_) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);  // a file, or a directory (a Measurement Set)
  }
  files_.clear();
}

}  // namespace uvflow
