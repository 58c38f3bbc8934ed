// prepare() opens every file and checks its header, so `uvflow check` and the start of a run
// report an unreadable file, a missing HDU, a table or a 1-D array as an InputError naming the
// file and the HDU, before anything runs. Frames are then read one per item: memory stays bounded
// however long the stream. The FITS reading itself (shared with image.psf and image.column_gain)
// is stages/shared/fits_image.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_read_fits {

inline constexpr Out<Image> frames{
    .name = "frames", .residency = Residency::host, .doc = "one plane per item, row 0 at the bottom"};

struct Params {
  std::optional<std::filesystem::path> path;
  std::optional<std::vector<std::filesystem::path>> paths;
  std::int64_t hdu = 0;
  std::string share = "none";
};

// The frames' size (when every plane has the same) and count, from the files' headers; unknown
// where a file cannot be read (prepare() reports it).
PortShapes describe_frames(const Params& p, const PortShapes&);

inline const StageDecl<Params> decl{
    .type = "io.read_fits",
    .summary = "stream the planes of FITS images (a cube, one image, a list or a glob of files) as frames",
    .doc = "Each plane of nx * ny pixels becomes one frame: a 2-D image is one frame, a cube (NAXIS3 > 1) one "
           "frame per plane, several files one after the other (a glob pattern such as data/frames_*.fits is "
           "expanded and sorted by name). Pixels are read as float with BSCALE/BZERO applied; undefined pixels "
           "become NaN. Every file's header is checked before the run starts (and by `uvflow check`): a file "
           "that cannot be read, a missing HDU, a table or a 1-D array is an input error naming the file and "
           "HDU. Frames are read one at a time, so memory stays bounded whatever the number of frames.",
    .outputs = {frames},
    .params = {{&Params::path,
                {.name = "path",
                 .doc = "a FITS file (an image or a cube) or a glob pattern of files; set this or paths",
                 .role = PathRole::input}},
               {&Params::paths, {.name = "paths", .doc = "FITS files, streamed in this order", .role = PathRole::input}},
               {&Params::hdu,
                {.name = "hdu",
                 .min = 0,
                 .max = 100000,
                 .doc = "HDU holding the image (1 = primary); 0: the primary array, or the first extension if it is "
                        "empty"}},
               {&Params::share,
                {.name = "share",
                 .choices = {"none", "frames"},
                 .doc = "under mpirun -np N (docs/distributed.md): none, every rank reads every plane; frames, plane i "
                        "of the stream is read (and so written) by rank i mod N alone, round-robin. One process reads "
                        "every plane either way"}}},
    .describe = describe_frames,
};

StageSpec spec();

}  // namespace uvflow::io_read_fits
