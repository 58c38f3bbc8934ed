#include "stages/io/read_fits.hpp"

#include <glob.h>

#include <algorithm>
#include <memory>
#include <string>

#include "runtime/error.hpp"
#include "stages/shared/fits_image.hpp"
#include "stages/shared/share.hpp"

namespace uvflow::io_read_fits {
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

// The files a path or paths parameter names, globs expanded.
std::vector<std::string> files_of(const Params& p) {
  std::vector<std::string> files;
  if (p.paths)
    for (const auto& f : *p.paths) files.push_back(f.string());
  else if (p.path)
    files.push_back(p.path->string());
  if (files.size() == 1 && has_wildcard(files[0])) files = expand(files[0]);
  return files;
}

class ReadFits : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    const bool one = p.path.has_value(), many = p.paths.has_value();
    if (one == many)
      throw ParamError(one ? "paths" : "path",
                       "set either path (a file or a glob pattern) or paths (a list of files)");
    if (many && p.paths->empty()) throw ParamError("paths", "the list of files is empty");
  }

  void prepare(PrepareContext& pc) override {
    std::int64_t n = 0;
    for (auto& f : files_of(params())) {
      fits::ImageFile img(f, int(params().hdu));
      img.require_planes();
      sources_.push_back({f, img.hdu(), n, img.planes()});
      n += img.planes();
    }
    length_ = n;
    pinned_ = pc.pinned(frames.name);
    share_ = Share(params().share == "frames");
  }

  std::int64_t stream_length() const override { return share_.count(length_); }

  void process(Context& ctx) override {
    const std::int64_t i = share_.global(ctx.item());
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
    ctx.emit(frames, img);
  }

 private:
  std::vector<Source> sources_;
  std::int64_t length_ = 0;
  Share share_;  // this rank's planes
  bool pinned_ = false;
  std::unique_ptr<fits::ImageFile> open_;
};

}  // namespace

PortShapes describe_frames(const Params& p, const PortShapes&) {
  PortShape s{.items = 0};
  try {
    for (auto& f : files_of(p)) {
      fits::ImageFile img(f, int(p.hdu));
      img.require_planes();
      const int nx = int(img.nx()), ny = int(img.ny());
      if (s.items == 0) s.nx = nx, s.ny = ny;
      else if (nx != s.nx || ny != s.ny) s.nx = s.ny = 0;  // frames of several sizes
      s.items += img.planes();
    }
  } catch (const InputError&) {
    return {};  // prepare() opens the files again and reports what is wrong with them
  }
  return {{std::string(frames.name), s}};
}

StageSpec spec() { return decl.spec({cpu_backend<ReadFits>()}); }

}  // namespace uvflow::io_read_fits
