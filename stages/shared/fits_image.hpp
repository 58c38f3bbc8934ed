// FITS images through cfitsio, for every stage that reads or writes them (io.read_fits,
// io.write_fits, image.psf, image.column_gain), so that they find HDUs and report errors alike.
// cfitsio's types stay in fits_image.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace uvflow::fits {

// cfitsio's text for a status code (and its per-thread message stack cleared), for every message
// about a FITS file.
std::string cfitsio_text(int status);

// An image HDU of a FITS file, open for reading.
class ImageFile {
 public:
  // Opens `file` at `hdu` (1-based as cfitsio counts; 0: the primary array, or the first
  // extension when the primary is empty). Throws InputError naming the file and HDU when the
  // file cannot be read or that HDU is absent or not an image.
  ImageFile(const std::string& file, int hdu);
  ~ImageFile();

  const std::string& file() const { return file_; }
  int hdu() const { return hdu_; }
  const std::vector<long>& axes() const { return axes_; }  // NAXIS1 (x, fastest), NAXIS2, ...
  std::int64_t nx() const { return axes_.empty() ? 0 : axes_[0]; }
  std::int64_t ny() const { return axes_.size() < 2 ? 1 : axes_[1]; }
  // Planes of nx * ny pixels: the product of the axes beyond the second.
  std::int64_t planes() const;
  // "file F, HDU n": the place every message about this image names.
  std::string where() const;
  // Reads plane `p` (0-based) as float, BSCALE/BZERO applied, undefined pixels as NaN.
  void read_plane(std::int64_t p, float* dst) const;
  // Throws InputError unless the image has two or more axes (a 2-D image or a cube).
  void require_planes() const;
  // A header keyword of this HDU, or nothing when it is absent; InputError naming the file, HDU
  // and keyword when it is present but not a number (a string, for text()).
  std::optional<double> number(const char* key) const;
  std::optional<std::string> text(const char* key) const;

 private:
  [[noreturn]] void fail(int status, const std::string& what) const;
  struct Handle;  // the cfitsio file, closed with this object
  std::string file_;
  int hdu_ = 0;
  std::vector<long> axes_;
  std::unique_ptr<Handle> f_;
};

// A new FITS file holding one image in its primary HDU. Failures (the disk, not the data) throw
// std::runtime_error "cannot write <shown_as> (FITS <what>): <cause>", the cause the system's
// ("No space left on device") where there is one, else cfitsio's text.
class OutputFile {
 public:
  // Creates `path` (which must not exist: a writer's temporary, Context::output_file); messages
  // name `shown_as` (the user's path; "": `path`).
  explicit OutputFile(const std::string& path, const std::string& shown_as = "");
  ~OutputFile();  // closes without checking; call close() to know the file is complete

  // The primary array: BITPIX -32 or -64 and the axes (NAXIS1 fastest).
  void create_image(int bitpix, const std::vector<long>& axes);
  void key(const char* name, double value, const char* comment);
  void key(const char* name, const std::string& value, const char* comment);
  // All the pixels, as float (cfitsio converts to the file's BITPIX).
  void write_pixels(const float* pixels, std::size_t n);
  void close();

 private:
  void check(int status, const char* what) const;
  struct Handle;
  std::string path_, shown_;
  std::unique_ptr<Handle> f_;
};

}  // namespace uvflow::fits
