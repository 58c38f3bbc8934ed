// The memos' data sets (stages/io/seeds_format.hpp) into uvflow: the visibilities streamed in
// blocks read with seeks (memory bounded by one block), and the file's own kernels as the stack,
// so that any gridder can be compared grid to grid with the seeds' codes on their data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_read_seeds {

inline constexpr Out<VisSetInfo> info{
    .name = "info",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "the Observation: visibility count and uvw statistics; emitted before the first block"};
inline constexpr Out<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .residency = Residency::host,
    .doc = "the file's kernels as given, with its geometry and the layouts asked for"};
inline constexpr Out<VisBlock> vis{
    .name = "vis", .residency = Residency::host, .doc = "blocks of block_size visibilities, in file order"};

struct Params {
  std::filesystem::path path;
  std::int64_t block_size = 1 << 20;
  std::int64_t image_size = 0;
  std::string layouts = "rows";
};

// Image size 0: the grid size / 1.2 (the usual padding) rounded to an even number.
int image_size_for(std::int64_t image_size, int grid_size);

// The kernels' geometry and the number of blocks, from the file's header; unknown where the file
// cannot be read (prepare() reports it).
PortShapes describe_outputs(const Params& p, const PortShapes&);

inline const StageDecl<Params> decl{
    .type = "io.read_seeds",
    .summary = "read a data set in the gridding memos' binary format: visibilities, and its kernels as the stack",
    .doc = "Reads the format of shared/WPROJ.md (little-endian: num_w_planes, support[], oversample, conv_size_half, "
           "kernels[planes][conv_size_half][conv_size_half] complex64, num_vis, uu[], vv[], ww[] (wavelengths), vis[] "
           "complex64, weight[], cell_size_rad, w_scale, grid_size). The header, num_vis and trailer are read and "
           "checked before the run (and by `uvflow check`): the file's length must be exactly what the counts say, "
           "and a truncated file, a negative or out-of-range count, kernels smaller than their supports need or a "
           "grid too small for them is an input error naming the file and the field. The kernel stack is the "
           "file's kernels as given, not normalised (they are what the seeds gridded with): plane p's compacted "
           "quarter is its top-left S = o/2 + o s_p + 1 square, plane k sits at |w| = k^2 / w_scale, the grid is "
           "grid_size cells of cell_size_rad (pos_u = -uu grid_size cell, pos_v = vv grid_size cell), and the "
           "image size, which the format lacks, is a parameter. Blocks of block_size visibilities are read with "
           "seeks, one array slice at a time, so memory stays bounded by one block; before the first, one pass "
           "over uu, vv and ww in blocks computes the VisSetInfo's statistics (max, min and RMS of |w|, max of |u| "
           "and |v|). The observation carries no frequency or phase centre (the format has none). Tested by "
           "writing a small file, reading it back, gridding it with grid.serial and grid.tiled and comparing with "
           "an independent double-precision Listing 1, and with truncated and inconsistent files.",
    .outputs = {info, kernels, vis},
    .params = {{&Params::path,
                {.name = "path", .doc = "the data set file", .required = true, .role = PathRole::input}},
               {&Params::block_size,
                {.name = "block_size", .unit = "visibilities", .min = 1, .max = 1 << 28,
                 .doc = "visibilities per emitted VisBlock (the last block holds the rest)"}},
               {&Params::image_size,
                {.name = "image_size", .unit = "pixels", .min = 0, .max = 1 << 17,
                 .doc = "output image side (the format has none; at most grid_size); 0: grid_size / 1.2 rounded to "
                        "an even number, the usual padding"}},
               {&Params::layouts,
                {.name = "layouts", .choices = {"rows", "gpu", "all", "quarter"},
                 .doc = "derived kernel layouts to build besides the compacted quarter, as kernels.wproj's: rows for "
                        "grid.tiled on the cpu, gpu (oerc and nag) for grid.tiled on cuda"}}},
    .concurrency = Concurrency::serial,
    .describe = describe_outputs,
};

StageSpec spec();

}  // namespace uvflow::io_read_seeds
