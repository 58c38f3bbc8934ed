#include "stages/shared/fits_image.hpp"

#include <fitsio.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "runtime/error.hpp"

namespace uvflow::fits {

std::string cfitsio_text(int status) {
  char msg[FLEN_STATUS] = "";
  fits_get_errstatus(status, msg);
  fits_clear_errmsg();  // cfitsio keeps a message stack per thread; nothing else reads it
  return msg;
}

namespace {

const char* hdu_kind(int type) {
  return type == ASCII_TBL ? "an ASCII table" : type == BINARY_TBL ? "a binary table" : "not an image";
}

}  // namespace

// ---------------------------------------------------------------- reading

struct ImageFile::Handle {
  fitsfile* f;
  ~Handle() {
    int status = 0;
    fits_close_file(f, &status);
  }
};

ImageFile::~ImageFile() = default;

ImageFile::ImageFile(const std::string& file, int hdu) : file_(file), hdu_(hdu) {
  int status = 0;
  fitsfile* raw = nullptr;
  // The disk-file call takes the name literally: no cfitsio extended syntax ("[1]", "+2", ...).
  if (fits_open_diskfile(&raw, file.c_str(), READONLY, &status))
    throw InputError("file " + file + ": cannot open as FITS (" + cfitsio_text(status) + ")");
  f_ = std::make_unique<Handle>(raw);
  int nhdu = 0, naxis = 0;
  if (fits_get_num_hdus(raw, &nhdu, &status) || fits_get_img_dim(raw, &naxis, &status))
    fail(status, "cannot read the primary header");
  // An empty primary array with the image in the first extension is common (compressed images).
  if (hdu_ == 0) hdu_ = naxis == 0 && nhdu > 1 ? 2 : 1;
  if (hdu_ > nhdu)
    throw InputError("file " + file + " has no HDU " + std::to_string(hdu_) + " (it has " + std::to_string(nhdu) + ")");
  int type = 0;
  if (fits_movabs_hdu(raw, hdu_, &type, &status)) fail(status, "cannot read the header");
  // Tile-compressed images are stored as binary tables but cfitsio reports them as IMAGE_HDU.
  if (type != IMAGE_HDU) throw InputError(where() + ": is " + hdu_kind(type) + ", not an image");
  if (fits_get_img_dim(raw, &naxis, &status)) fail(status, "cannot read NAXIS");
  if (naxis == 0) throw InputError(where() + ": holds no image (NAXIS = 0)");
  axes_.assign(naxis, 0);
  if (fits_get_img_size(raw, naxis, axes_.data(), &status)) fail(status, "cannot read the NAXISn keywords");
}

void ImageFile::fail(int status, const std::string& what) const {
  throw InputError(where() + ": " + what + " (" + cfitsio_text(status) + ")");
}

std::string ImageFile::where() const { return "file " + file_ + ", HDU " + std::to_string(hdu_); }

std::int64_t ImageFile::planes() const {
  std::int64_t n = 1;
  for (size_t i = 2; i < axes_.size(); ++i) n *= axes_[i];
  return n;
}

void ImageFile::require_planes() const {
  if (axes_.size() < 2)
    throw InputError(where() + ": is a 1-D array of " + std::to_string(nx()) + " values, not an image");
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i] <= 0) throw InputError(where() + ": NAXIS" + std::to_string(i + 1) + " is 0 (no pixels)");
}

void ImageFile::read_plane(std::int64_t p, float* dst) const {
  std::vector<long> first(axes_.size(), 1);
  for (std::int64_t i = 2, rest = p; i < std::int64_t(axes_.size()); ++i) {
    first[i] = long(rest % axes_[i]) + 1;
    rest /= axes_[i];
  }
  int status = 0, anynul = 0;
  float nan = NAN;
  if (fits_read_pix(f_->f, TFLOAT, first.data(), long(nx() * ny()), &nan, dst, &anynul, &status))
    fail(status, "cannot read plane " + std::to_string(p));
}

std::optional<double> ImageFile::number(const char* key) const {
  int status = 0;
  double v = 0;
  fits_read_key(f_->f, TDOUBLE, key, &v, nullptr, &status);
  if (status == KEY_NO_EXIST) {
    fits_clear_errmsg();
    return std::nullopt;
  }
  if (status) fail(status, std::string("keyword ") + key + " is not a number");
  return v;
}

std::optional<std::string> ImageFile::text(const char* key) const {
  int status = 0;
  char v[FLEN_VALUE] = "";
  fits_read_key(f_->f, TSTRING, key, v, nullptr, &status);
  if (status == KEY_NO_EXIST) {
    fits_clear_errmsg();
    return std::nullopt;
  }
  if (status) fail(status, std::string("keyword ") + key + " is not a string");
  return std::string(v);
}

// ---------------------------------------------------------------- writing

struct OutputFile::Handle {
  fitsfile* f = nullptr;
  ~Handle() {
    int status = 0;
    if (f) fits_close_file(f, &status);
  }
};

OutputFile::OutputFile(const std::string& path, const std::string& shown_as)
    : path_(path), shown_(shown_as.empty() ? path : shown_as), f_(std::make_unique<Handle>()) {
  int status = 0;
  errno = 0;
  // The disk-file call takes the name literally (no cfitsio extended syntax, no "!" to replace).
  fits_create_diskfile(&f_->f, path.c_str(), &status);
  check(status, "create");
}

OutputFile::~OutputFile() = default;

// cfitsio reports a failed write as "error writing to FITS file"; the cause (a full disk, a
// quota) is in errno, which the failing call set: each call starts with errno cleared.
void OutputFile::check(int status, const char* what) const {
  if (!status) {
    errno = 0;
    return;
  }
  const bool io = status == FILE_NOT_CREATED || status == WRITE_ERROR || status == FILE_NOT_CLOSED ||
                  status == READ_ERROR || status == MEMORY_ALLOCATION;
  const int err = errno;
  std::string cause = cfitsio_text(status);
  if (io && err) cause = std::string(std::strerror(err)) + " (cfitsio: " + cause + ")";
  throw std::runtime_error("cannot write " + shown_ + " (FITS " + what + "): " + cause);
}

void OutputFile::create_image(int bitpix, const std::vector<long>& axes) {
  int status = 0;
  std::vector<long> naxes = axes;
  fits_create_img(f_->f, bitpix, int(naxes.size()), naxes.data(), &status);
  check(status, "create image");
}

void OutputFile::key(const char* name, double value, const char* comment) {
  int status = 0;
  fits_update_key(f_->f, TDOUBLE, name, &value, comment, &status);
  check(status, name);
}

void OutputFile::key(const char* name, const std::string& value, const char* comment) {
  int status = 0;
  fits_update_key(f_->f, TSTRING, name, const_cast<char*>(value.c_str()), comment, &status);
  check(status, name);
}

void OutputFile::write_pixels(const float* pixels, std::size_t n) {
  int status = 0;
  std::vector<long> first(8, 1);  // cfitsio reads as many as the image has axes
  fits_write_pix(f_->f, TFLOAT, first.data(), long(n), const_cast<float*>(pixels), &status);
  check(status, "write pixels");
}

void OutputFile::close() {
  int status = 0;
  fits_close_file(f_->f, &status);
  f_->f = nullptr;
  check(status, "close");
}

}  // namespace uvflow::fits
