#include "runtime/output_files.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <random>
#include <regex>

#include "runtime/error.hpp"

namespace uvflow {
namespace fs = std::filesystem;
namespace {

// The host part of the temporaries' names: a run on another machine that shares the folder
// (NFS) is never taken for a dead one.
std::string host_tag() {
  char h[256] = "";
  gethostname(h, sizeof h - 1);
  std::string s;
  for (char* c = h; *c && s.size() < 32; ++c) s += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  return s.empty() ? "host" : s;
}

const std::regex& stale_pattern() {
  // .NAME.<tag>-<host>-<pid>-<random>.tmp
  static const std::regex re(R"(^\..+\.[A-Za-z0-9_]+-([A-Za-z0-9_]+)-([0-9]+)-[0-9a-f]{8}\.tmp$)");
  return re;
}

}  // namespace

int OutputFiles::remove_stale(const fs::path& dir) {
  static const std::string host = host_tag();
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, stale_pattern()) || m[1] != host) continue;
    const long pid = std::stol(m[2]);
    // ESRCH: no such process. A live pid (or one we may not signal) may be a run still writing.
    if (pid <= 0 || kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rec;
    if (fs::remove_all(it->path(), rec) != static_cast<std::uintmax_t>(-1) && !rec) ++removed;
  }
  return removed;
}

fs::path OutputFiles::temp_for(const fs::path& final_path) {
  const fs::path& f = final_path;
  if (f.empty() || !f.has_filename())
    throw OutputError("output path '" + f.string() + "' names a folder, not a file");
  const fs::path dir = f.has_parent_path() ? f.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw OutputError("cannot create the folder " + dir.string() + " for " + f.string() + ": " + ec.message());
  // A file cannot replace a folder; a casacore table (a Measurement Set writer's output) can be.
  if (fs::is_directory(f, ec) && !fs::exists(f / "table.dat", ec))
    throw OutputError("output path " + f.string() + " is an existing folder; name a file in it, or remove it");

  std::lock_guard lk(m_);
  for (auto& x : files_)
    if (x.final_path == f) throw OutputError("two outputs are written to " + f.string());
  if (cleaned_.insert(fs::absolute(dir, ec)).second)
    if (int n = remove_stale(dir))
      spdlog::info("removed {} temporary output{} of killed runs from {}", n, n == 1 ? "" : "s", dir.string());

  static const std::string host = host_tag();
  const std::string prefix = "-" + host + "-" + std::to_string(getpid()) + "-";  // not cached: a fork has its own
  // A small generator: libuvflow has initial-exec TLS (graph/interrupt.cpp), so its whole TLS block
  // must fit the few hundred bytes glibc keeps for libraries loaded later (Python's import of
  // uvflow dlopens it); an mt19937 here (5000 bytes) made that import fail.
  static thread_local std::minstd_rand rng(std::random_device{}());
  for (int attempt = 0;; ++attempt) {
    char rnd[9];
    std::snprintf(rnd, sizeof rnd, "%08x", unsigned(rng()));
    std::string name = ".";  // appended, not "." + string: g++ 12 misreads that as an overlapping copy
    name.append(f.filename().string()).append(".").append(tag_).append(prefix).append(rnd).append(".tmp");
    fs::path box = dir / name;
    // mkdir is exclusive and does not follow a link planted under that name.
    if (mkdir(box.c_str(), 0700) == 0) {
      files_.push_back({box, f});
      return files_.back().temp();
    }
    if (errno != EEXIST || attempt == 8)
      throw OutputError("cannot write " + f.string() + ": " + std::strerror(errno));
  }
}

std::vector<fs::path> OutputFiles::commit() {
  std::lock_guard lk(m_);
  struct Moved {
    const File* file;
    bool had_previous;
  };
  std::vector<Moved> moved;
  std::vector<fs::path> done;
  std::string failure;
  for (auto& x : files_) {
    std::error_code ec;
    const bool is_dir = fs::is_directory(x.temp(), ec);
    const auto st = fs::symlink_status(x.final_path, ec);
    const bool had = fs::exists(st) || fs::is_symlink(st);
    if (had && !is_dir && fs::is_directory(st)) {
      failure = x.final_path.string() + " is now a folder; a file cannot replace it";
      break;
    }
    if (had) {
      // Kept aside until every output is in place. A hard link keeps a replaced file visible
      // throughout (rename then swaps it atomically); a folder, or a file system without hard
      // links, moves aside.
      if (is_dir || fs::is_directory(st) || link(x.final_path.c_str(), x.aside().c_str()) != 0) {
        fs::rename(x.final_path, x.aside(), ec);
        if (ec) {
          failure = "cannot move " + x.final_path.string() + " aside to replace it: " + ec.message();
          break;
        }
      }
    }
    fs::rename(x.temp(), x.final_path, ec);
    if (ec) {
      failure = "cannot move the new " + x.final_path.string() + " into place: " + ec.message();
      if (had && !fs::exists(fs::symlink_status(x.final_path))) fs::rename(x.aside(), x.final_path, ec);
      break;
    }
    moved.push_back({&x, had});
    done.push_back(x.final_path);
  }
  if (!failure.empty()) {
    // Put back what was there before, newest first.
    for (auto it = moved.rbegin(); it != moved.rend(); ++it) {
      std::error_code ec;
      if (it->had_previous) {
        if (fs::is_directory(it->file->aside(), ec)) fs::remove_all(it->file->final_path, ec);
        fs::rename(it->file->aside(), it->file->final_path, ec);
      } else {
        fs::remove_all(it->file->final_path, ec);
      }
    }
  }
  for (auto& x : files_) {
    std::error_code ec;
    fs::remove_all(x.box, ec);  // what is left: the previous versions, or the uncommitted outputs
  }
  files_.clear();
  if (!failure.empty()) throw OutputError(failure + "; no output was written (those already there are as they were)");
  return done;
}

void OutputFiles::write_text(const fs::path& temp, const fs::path& final_path, const std::string& text) {
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  bool ok = fd >= 0;
  for (std::size_t at = 0; ok && at < text.size();) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) at += std::size_t(n);
  }
  const int err = errno;
  if (fd >= 0 && close(fd) != 0 && ok) throw OutputError("cannot write " + final_path.string() + ": " + std::strerror(errno));
  if (!ok) throw OutputError("cannot write " + final_path.string() + ": " + std::strerror(err));
}

std::vector<fs::path> OutputFiles::finals() {
  std::lock_guard lk(m_);
  std::vector<fs::path> v;
  for (auto& x : files_) v.push_back(x.final_path);
  return v;
}

void OutputFiles::rollback() {
  std::lock_guard lk(m_);
  for (auto& x : files_) {
    std::error_code ec;
    fs::remove_all(x.box, ec);
  }
  files_.clear();
}

}  // namespace uvflow
