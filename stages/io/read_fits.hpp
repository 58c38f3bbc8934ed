// io.read_fits: stream the planes of FITS images as frames (cfitsio), one frame per item.
//
//   out  frames  Image, stream, host: one plane each, index = position in the stream
//   params
//     path   a FITS file (a 2-D image is one frame, a cube one frame per plane) or a glob pattern
//            such as data/frames_*.fits (matches sorted by name); set this or `paths`
//     paths  a list of FITS files, streamed in the order given
//     hdu    which HDU holds the image (1 = primary); 0 picks the primary array, or the first
//            extension when the primary array is empty
//
// prepare() opens every file and checks its header, so `uvflow check` and the start of a run
// report an unreadable file, a missing HDU, a table or a 1-D array as an InputError naming the
// file and the HDU, before anything runs. Frames are then read one per item: memory stays bounded
// however long the stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec read_fits_spec();

namespace fits {

// cfitsio's text for a status code (and its per-thread message stack cleared), for every message
// about a FITS file.
std::string cfitsio_text(int status);

// An image HDU of a FITS file, open for reading; shared by the stages that read FITS images
// (io.read_fits, image.psf, image.column_gain) so they find HDUs and report errors alike.
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

 private:
  [[noreturn]] void fail(int status, const std::string& what) const;
  struct Handle;  // the cfitsio file, closed with this object
  std::string file_;
  int hdu_ = 0;
  std::vector<long> axes_;
  std::unique_ptr<Handle> f_;
};

}  // namespace fits
}  // namespace uvflow
