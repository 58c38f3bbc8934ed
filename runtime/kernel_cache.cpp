#include "runtime/kernel_cache.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "runtime/error.hpp"

namespace uvflow::kernel_cache {
namespace fs = std::filesystem;
namespace {

constexpr std::uint64_t kDefaultCap = std::uint64_t(4) << 30;
constexpr char kCapVariable[] = "UVFLOW_CACHE_MAX";

// The names the cache writes: stacks, wisdom, and their temporaries (NAME.tmp-PID-RANDOM).
bool is_cache_file(const std::string& name, bool* temporary) {
  static const std::regex re(R"(^(wproj-[0-9a-f]{16}\.bin|fftwf\.wisdom)(\.tmp-[0-9]+-[0-9]+)?$)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return false;
  *temporary = m[2].matched;
  return true;
}

std::string age(fs::file_time_type t) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(fs::file_time_type::clock::now() - t).count();
  char b[32];
  if (s < 120) std::snprintf(b, sizeof b, "%llds ago", static_cast<long long>(s));
  else if (s < 7200) std::snprintf(b, sizeof b, "%lld min ago", static_cast<long long>(s / 60));
  else if (s < 172800) std::snprintf(b, sizeof b, "%lld h ago", static_cast<long long>(s / 3600));
  else std::snprintf(b, sizeof b, "%lld days ago", static_cast<long long>(s / 86400));
  return b;
}

}  // namespace

fs::path root() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "uvflow";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "uvflow";
  return {};
}

fs::path expand(const std::string& dir) {
  static const std::string token = "{cache}";
  if (dir.rfind(token, 0) != 0) return dir;
  const fs::path r = root();
  if (r.empty())
    throw InputError("the kernel cache folder " + dir + " needs $XDG_CACHE_HOME or $HOME, and neither is set; "
                     "set kernels.wproj's cache_dir to a folder, or \"\" for no cache");
  const std::string rest = dir.substr(token.size());
  return rest.empty() ? r : r / fs::path(rest).relative_path();
}

std::uint64_t cap_bytes() {
  const char* v = std::getenv(kCapVariable);
  if (!v || !*v) return kDefaultCap;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  std::uint64_t unit = 1;
  std::string suffix = end;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") unit = 1ull << 10;
  else if (suffix == "M" || suffix == "MiB") unit = 1ull << 20;
  else if (suffix == "G" || suffix == "GiB") unit = 1ull << 30;
  else if (!suffix.empty()) unit = 0;
  if (end == v || unit == 0 || !(x >= 0) || x * double(unit) > 1e19)
    throw InputError(std::string(kCapVariable) + "=" + v + ": expected a size such as 4G, 500M or 0 (no cap)");
  return std::uint64_t(x * double(unit));
}

std::vector<Entry> list(const fs::path& dir) {
  std::vector<Entry> v;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    bool temporary = false;
    if (!it->is_regular_file(ec) || !is_cache_file(it->path().filename().string(), &temporary)) continue;
    Entry e{it->path(), it->file_size(ec), it->last_write_time(ec)};
    if (!ec) v.push_back(e);
    ec.clear();
  }
  std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.used > b.used; });
  return v;
}

std::uint64_t total_bytes(const std::vector<Entry>& entries) {
  std::uint64_t t = 0;
  for (auto& e : entries) t += e.bytes;
  return t;
}

void touch(const fs::path& file) {
  std::error_code ec;  // a read-only cache is still a cache: only its order is lost
  fs::last_write_time(file, fs::file_time_type::clock::now(), ec);
}

Trimmed trim(const fs::path& dir, std::uint64_t cap) {
  auto entries = list(dir);
  Trimmed t;
  t.total = total_bytes(entries);
  if (cap == 0) return t;
  const auto young = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (auto it = entries.rbegin(); it != entries.rend() && t.total > cap; ++it) {
    bool temporary = false;
    is_cache_file(it->path.filename().string(), &temporary);
    if (temporary && it->used > young) continue;
    std::error_code ec;
    if (!fs::remove(it->path, ec) || ec) continue;
    ++t.removed;
    t.removed_bytes += it->bytes;
    t.total -= it->bytes;
  }
  return t;
}

std::string listing(const fs::path& dir) {
  std::ostringstream s;
  const auto entries = list(dir);
  s << "kernel cache " << dir.string() << "\n";
  for (auto& e : entries)
    s << "  " << fs::relative(e.path, dir).string() << "  " << bytes_text(e.bytes) << "  used " << age(e.used) << "\n";
  const std::uint64_t cap = cap_bytes();
  s << entries.size() << (entries.size() == 1 ? " file, " : " files, ") << bytes_text(total_bytes(entries)) << " of "
    << (cap ? bytes_text(cap) + " (" + kCapVariable + ")" : std::string("no cap (") + kCapVariable + "=0)") << "\n";
  return s.str();
}

std::string clear(const fs::path& dir) {
  const auto entries = list(dir);
  std::uint64_t bytes = 0;
  int n = 0;
  for (auto& e : entries) {
    std::error_code ec;
    if (fs::remove(e.path, ec) && !ec) {
      ++n;
      bytes += e.bytes;
    }
  }
  std::ostringstream s;
  s << "removed " << n << (n == 1 ? " file" : " files") << " (" << bytes_text(bytes) << ") from " << dir.string() << "\n";
  return s.str();
}

}  // namespace uvflow::kernel_cache
