#include "stages/io/read_fits.hpp"

#include <fitsio.h>
#include <glob.h>

#include <algorithm>
#include <cmath>

#include "runtime/error.hpp"
#include "runtime/payloads/image.hpp"

namespace uvflow {
namespace fits {

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

}  // namespace fits

namespace {

struct Source {
  std::string file;
  int hdu;               // resolved, so later opens need no search
  std::int64_t first;    // stream index of its first plane
  std::int64_t planes;
};

bool has_wildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> expand(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);  // sorted by name
  std::vector<std::string> out(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
  globfree(&g);
  if (rc == GLOB_NOMATCH) throw InputError("no file matches the pattern " + pattern);
  if (rc != 0) throw InputError("cannot list the files matching " + pattern);
  return out;
}

class ReadFits : public Stage {
 public:
  void configure(const Params& p) override {
    const bool one = p.has("path"), many = p.has("paths");
    if (one == many)
      throw ParamError(one ? "paths" : "path",
                       "set either path (a file or a glob pattern) or paths (a list of files)");
    if (many && p.paths("paths").empty()) throw ParamError("paths", "the list of files is empty");
    files_ = many ? p.paths("paths") : std::vector<std::string>{p.string("path")};
    hdu_ = int(p.integer("hdu"));
  }

  void prepare(PrepareContext& pc) override {
    if (files_.size() == 1 && has_wildcard(files_[0])) files_ = expand(files_[0]);
    std::int64_t n = 0;
    for (auto& f : files_) {
      fits::ImageFile img(f, hdu_);
      img.require_planes();
      sources_.push_back({f, img.hdu(), n, img.planes()});
      n += img.planes();
    }
    length_ = n;
    pinned_ = pc.pinned("frames");
  }

  std::int64_t stream_length() const override { return length_; }

  void process(Context& ctx) override {
    const std::int64_t i = ctx.item();
    auto s = std::prev(std::upper_bound(sources_.begin(), sources_.end(), i,
                                        [](std::int64_t v, const Source& x) { return v < x.first; }));
    if (!open_ || open_->file() != s->file) {
      open_.reset();  // one file open at a time, however many there are
      open_ = std::make_unique<fits::ImageFile>(s->file, s->hdu);
      open_->require_planes();
    }
    auto img = std::make_shared<Image>();
    img->index = i;
    img->nx = int(open_->nx());
    img->ny = int(open_->ny());
    img->pixels = Array<float>::host(std::size_t(img->nx) * img->ny, pinned_);
    open_->read_plane(i - s->first, img->pixels.data());
    ctx.emit("frames", img);
  }

 private:
  std::vector<std::string> files_;
  int hdu_ = 0;
  std::vector<Source> sources_;
  std::int64_t length_ = 0;
  bool pinned_ = false;
  std::unique_ptr<fits::ImageFile> open_;
};

}  // namespace

StageSpec read_fits_spec() {
  StageSpec s;
  s.type = "io.read_fits";
  s.summary = "stream the planes of FITS images (a cube, one image, a list or a glob of files) as frames";
  s.doc =
      "Each plane of nx * ny pixels becomes one frame: a 2-D image is one frame, a cube (NAXIS3 > 1) one "
      "frame per plane, several files one after the other (a glob pattern such as data/frames_*.fits is "
      "expanded and sorted by name). Pixels are read as float with BSCALE/BZERO applied; undefined pixels "
      "become NaN. Every file's header is checked before the run starts (and by `uvflow check`): a file "
      "that cannot be read, a missing HDU, a table or a 1-D array is an input error naming the file and "
      "HDU. Frames are read one at a time, so memory stays bounded whatever the number of frames.";
  s.outputs = {{"frames", "Image", Arity::stream, Residency::host, "one plane per item, row 0 at the bottom"}};
  s.params = {
      {"path", ParamType::path, {}, true, "", {}, {}, {}, {},
       "a FITS file (an image or a cube) or a glob pattern of files; set this or paths"},
      {"paths", ParamType::paths, {}, true, "", {}, {}, {}, {}, "FITS files, streamed in this order"},
      {"hdu", ParamType::integer, std::int64_t(0), false, "", 0, 100000, {}, {},
       "HDU holding the image (1 = primary); 0: the primary array, or the first extension if it is empty"}};
  s.backends = {{"cpu", [] { return std::make_unique<ReadFits>(); }}};
  return s;
}

}  // namespace uvflow
