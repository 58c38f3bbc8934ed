// The gridding memos' binary data format (shared/WPROJ.md, "The seeds' binary input format"), read
// by io.read_seeds and written by io.write_seeds and io.write_grid: little-endian, no padding,
//   int32 num_w_planes; int32 support[num_w_planes]; int32 oversample; int32 conv_size_half;
//   complex64 kernels[num_w_planes][conv_size_half][conv_size_half]; int32 num_vis;
//   float32 uu[n], vv[n], ww[n]; complex64 vis[n]; float32 weight[n];
//   float64 cell_size_rad; float64 w_scale; int32 grid_size
// and their expected-output file: int32 num_skipped; float64 norm; int32 grid_size;
// complex64 grid[grid_size][grid_size].
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace uvflow::seeds_format {

static_assert(std::endian::native == std::endian::little, "the memos' format is little-endian, as this host must be");

// Where everything lies in one file, from its header, num_vis and trailer; every field checked.
struct Layout {
  std::vector<std::int32_t> support;  // per plane
  int oversample = 0;
  int conv_size_half = 0;   // each plane's kernel is conv_size_half^2 values, K[iy][ix]
  std::int64_t num_vis = 0;
  double cell_size_rad = 0;
  double w_scale = 0;
  int grid_size = 0;
  std::int64_t kernels_at = 0;  // byte offset of kernels[0][0][0]
  int planes() const { return int(support.size()); }
  std::int64_t uu_at() const { return kernels_at + std::int64_t(planes()) * conv_size_half * conv_size_half * 8 + 4; }
  std::int64_t vv_at() const { return uu_at() + 4 * num_vis; }
  std::int64_t ww_at() const { return vv_at() + 4 * num_vis; }
  std::int64_t vis_at() const { return ww_at() + 4 * num_vis; }
  std::int64_t weight_at() const { return vis_at() + 8 * num_vis; }
  std::int64_t trailer_at() const { return weight_at() + 4 * num_vis; }
  std::int64_t file_size() const { return trailer_at() + 20; }
};

// Reads and checks the header, num_vis and trailer of `path` without reading the arrays: the
// file's length must be exactly what the counts say. Throws InputError naming the file and the
// field (truncated, negative or out-of-range counts, kernels too small for their supports).
Layout read_layout(const std::filesystem::path& path);

// A file read at offsets; errors are InputErrors naming the file and `what` is being read.
class Reader {
 public:
  explicit Reader(const std::filesystem::path& path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  void read(std::int64_t offset, void* dst, std::size_t bytes, const char* what);
  const std::string& name() const { return name_; }

 private:
  std::FILE* f_ = nullptr;
  std::string name_;
};

// A new file written through a temporary made for it (Context::output_file), created exclusively;
// errors are OutputErrors naming `shown` (the user's path) and the cause.
class Writer {
 public:
  Writer(const std::filesystem::path& temp, const std::filesystem::path& shown);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  void write(const void* src, std::size_t bytes);
  template <class T> void put(T v) { write(&v, sizeof v); }
  void close();  // flushes: a full disk is reported here, not lost in the destructor

 private:
  std::FILE* f_ = nullptr;
  std::string shown_;
};

}  // namespace uvflow::seeds_format
