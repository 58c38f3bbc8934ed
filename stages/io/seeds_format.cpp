#include "stages/io/seeds_format.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "runtime/error.hpp"
#include "runtime/payloads/kernels.hpp"

namespace uvflow::seeds_format {

namespace {
constexpr int kMaxPlanes = 32767;   // GridCoord keeps the plane and the support in 16 bits
constexpr int kMaxSupport = 32767;
constexpr int kMaxGrid = 1 << 17;   // 7x the largest of the memos' grids (18000)
}  // namespace

Reader::Reader(const std::filesystem::path& path) : name_("seeds file '" + path.string() + "'") {
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) throw InputError(name_ + ": cannot open (" + std::strerror(errno) + ")");
}

Reader::~Reader() {
  if (f_) std::fclose(f_);
}

void Reader::read(std::int64_t offset, void* dst, std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  if (fseeko(f_, off_t(offset), SEEK_SET) != 0 || std::fread(dst, 1, bytes, f_) != bytes)
    throw InputError(name_ + ": cannot read " + what + " (" + std::to_string(bytes) + " bytes at offset " +
                     std::to_string(offset) + ")" + (std::ferror(f_) ? std::string(": ") + std::strerror(errno) : ""));
}

Layout read_layout(const std::filesystem::path& path) {
  Reader r(path);
  std::error_code ec;
  const auto size = std::int64_t(std::filesystem::file_size(path, ec));
  if (ec) throw InputError(r.name() + ": cannot read its size (" + ec.message() + ")");
  auto bad = [&](const std::string& field, const std::string& why) { return InputError(r.name() + ": " + field + " " + why); };
  // Every field is checked to lie inside the file before it is read: a truncated file says where.
  auto need = [&](std::int64_t at, std::int64_t bytes, const std::string& field) {
    if (at + bytes > size)
      throw bad(field, "at byte " + std::to_string(at) + " needs " + std::to_string(bytes) + " bytes, the file has " +
                           std::to_string(size) + " bytes in all: truncated");
  };
  auto int32_at = [&](std::int64_t at, const char* field) {
    need(at, 4, field);
    std::int32_t v;
    r.read(at, &v, 4, field);
    return v;
  };

  Layout l;
  const std::int32_t planes = int32_at(0, "num_w_planes");
  if (planes < 1 || planes > kMaxPlanes) throw bad("num_w_planes", "= " + std::to_string(planes) + ", not in [1, 32767]");
  need(4, 4 * std::int64_t(planes), "support[" + std::to_string(planes) + "]");
  l.support.resize(std::size_t(planes));
  r.read(4, l.support.data(), 4 * std::size_t(planes), "support");
  for (int p = 0; p < planes; ++p)
    if (l.support[p] < 0 || l.support[p] > kMaxSupport)
      throw bad("support[" + std::to_string(p) + "]", "= " + std::to_string(l.support[p]) + ", not in [0, 32767]");
  const std::int64_t o_at = 4 + 4 * std::int64_t(planes);
  l.oversample = int32_at(o_at, "oversample");
  if (l.oversample < 2 || l.oversample > 64 || l.oversample % 2)
    throw bad("oversample", "= " + std::to_string(l.oversample) + ", not an even number in [2, 64]");
  l.conv_size_half = int32_at(o_at + 4, "conv_size_half");
  const auto widest = std::max_element(l.support.begin(), l.support.end());
  const int needed = kernel_half_size(l.oversample, *widest);
  if (l.conv_size_half < needed)
    throw bad("conv_size_half", "= " + std::to_string(l.conv_size_half) + ", but support[" +
                                    std::to_string(widest - l.support.begin()) + "] = " + std::to_string(*widest) +
                                    " at oversample " + std::to_string(l.oversample) + " needs at least " +
                                    std::to_string(needed) + " (o/2 + o*s + 1)");
  l.kernels_at = o_at + 8;
  // In double first: conv_size_half^2 * planes may overflow 64 bits for a corrupt header.
  const double kernel_bytes = 8.0 * double(l.conv_size_half) * l.conv_size_half * planes;
  if (double(l.kernels_at) + kernel_bytes + 4 > double(size))
    throw bad("kernels", "(" + std::to_string(planes) + " planes of " + std::to_string(l.conv_size_half) + "^2 complex64, " +
                             bytes_text(std::uint64_t(kernel_bytes)) + ") and num_vis do not fit in the file's " +
                             std::to_string(size) + " bytes: truncated, or num_w_planes or conv_size_half is wrong");
  const std::int64_t n_at = l.uu_at() - 4;
  const std::int32_t n = int32_at(n_at, "num_vis");
  if (n < 0) throw bad("num_vis", "= " + std::to_string(n) + " is negative");
  l.num_vis = n;
  if (l.file_size() != size)
    throw bad("num_vis", "= " + std::to_string(n) + ": with num_w_planes = " + std::to_string(planes) +
                             " and conv_size_half = " + std::to_string(l.conv_size_half) + " the file should hold " +
                             std::to_string(l.file_size()) + " bytes, it holds " + std::to_string(size) +
                             (size < l.file_size() ? " (truncated)" : ""));
  r.read(l.trailer_at(), &l.cell_size_rad, 8, "cell_size_rad");
  r.read(l.trailer_at() + 8, &l.w_scale, 8, "w_scale");
  r.read(l.trailer_at() + 16, &l.grid_size, 4, "grid_size");
  if (!(l.cell_size_rad > 0 && l.cell_size_rad < 1))
    throw bad("cell_size_rad", "= " + std::to_string(l.cell_size_rad) + ", not in (0, 1) radians");
  if (!std::isfinite(l.w_scale) || l.w_scale < 0 || (planes > 1 && l.w_scale == 0))
    throw bad("w_scale", "= " + std::to_string(l.w_scale) + ", not a positive number (" + std::to_string(planes) + " planes)");
  if (l.grid_size < 2 || l.grid_size > kMaxGrid || l.grid_size % 2 || 2 * *widest + 1 > l.grid_size)
    throw bad("grid_size", "= " + std::to_string(l.grid_size) + ", not an even size in [2, " + std::to_string(kMaxGrid) +
                               "] holding the widest kernel footprint (" + std::to_string(2 * *widest + 1) + " cells)");
  return l;
}

Writer::Writer(const std::filesystem::path& temp, const std::filesystem::path& shown) : shown_(shown.string()) {
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd >= 0) f_ = fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw OutputError("cannot write " + shown_ + ": " + std::strerror(err));
  }
}

Writer::~Writer() {
  if (f_) std::fclose(f_);  // after a failure: the temporary is removed by the rollback
}

void Writer::write(const void* src, std::size_t bytes) {
  if (std::fwrite(src, 1, bytes, f_) != bytes) throw OutputError("cannot write " + shown_ + ": " + std::strerror(errno));
}

void Writer::close() {
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) throw OutputError("cannot write " + shown_ + ": " + std::strerror(errno));
}

}  // namespace uvflow::seeds_format
