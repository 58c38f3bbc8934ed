// The kernel cache: kernels.wproj's stacks (wproj-*.bin) and FFTW wisdom (fftwf.wisdom), kept
// between runs under the user's cache folder, $XDG_CACHE_HOME/uvflow or else ~/.cache/uvflow,
// and capped in size: UVFLOW_CACHE_MAX (bytes, or with a K, M or G suffix; 0: no cap), 4 GiB
// when unset. When it grows past the cap, the least recently used files go first (a file is used
// when it is written or read: its modification time). Only files of those names are counted or
// removed, so a cache_dir that names a folder holding other files costs none of them.
// `uvflow cache` lists it and `uvflow cache clear` empties it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace uvflow::kernel_cache {

// kernels.wproj's cache_dir by default, and the folder `uvflow cache` shows.
inline constexpr char kDefaultDir[] = "{cache}/kernels";

// $XDG_CACHE_HOME/uvflow, else $HOME/.cache/uvflow; "" when neither variable is set.
std::filesystem::path root();
// `dir` with a leading "{cache}" replaced by root() (kernels.wproj's cache_dir: "{cache}/kernels").
// Throws InputError when it has "{cache}" and root() is "".
std::filesystem::path expand(const std::string& dir);
// The cap from UVFLOW_CACHE_MAX (0: none). Throws InputError naming the variable when unreadable.
std::uint64_t cap_bytes();

struct Entry {
  std::filesystem::path path;
  std::uint64_t bytes = 0;
  std::filesystem::file_time_type used;
};
// The cache's files under `dir` (its subfolders too), most recently used first.
std::vector<Entry> list(const std::filesystem::path& dir);
std::uint64_t total_bytes(const std::vector<Entry>& entries);
// Marks `file` as used now (a cache hit), so that it is evicted last.
void touch(const std::filesystem::path& file);

struct Trimmed {
  int removed = 0;
  std::uint64_t removed_bytes = 0, total = 0;  // total: what the cache holds afterwards
};
// Removes the least recently used files under `dir` until they total at most `cap` (0: none).
// Temporaries of writers still at work (younger than an hour) stay.
Trimmed trim(const std::filesystem::path& dir, std::uint64_t cap);

// `uvflow cache`: each file with its size and age, then the total and the cap.
std::string listing(const std::filesystem::path& dir);
// `uvflow cache clear`: removes every cache file under `dir`; says what it removed.
std::string clear(const std::filesystem::path& dir);

}  // namespace uvflow::kernel_cache
