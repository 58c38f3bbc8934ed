// A fresh folder per test, removed afterwards; files written into it by name.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace uvflow::test {

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("uvflow-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    auto p = path_ / name;
    std::ofstream(p) << text;
    return p;
  }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A small file system that fills up: a 64 KiB tmpfs (needs root; tests skip when not mounted).
struct FullDisk {
  std::filesystem::path at;
  bool mounted = false;
  explicit FullDisk(const std::filesystem::path& p) : at(p) {
    std::filesystem::create_directories(at);
    mounted = std::system(("mount -t tmpfs -o size=64k tmpfs " + at.string() + " 2>/dev/null").c_str()) == 0;
  }
  ~FullDisk() {
    if (mounted) (void)!std::system(("umount " + at.string()).c_str());
  }
  FullDisk(const FullDisk&) = delete;
  FullDisk& operator=(const FullDisk&) = delete;
};

}  // namespace uvflow::test
