// uvflow's data in the gridding memos' binary format (stages/io/seeds_format.hpp), so that the
// seeds' own gridders can run on any visibilities uvflow reads or simulates, with its kernels.
#pragma once

#include <filesystem>

#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_write_seeds {

inline constexpr In<VisBlock> vis{.name = "vis", .residency = Residency::host, .doc = "the visibilities, in stream order"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .residency = Residency::host,
    .doc = "the kernel stack whose quarters, supports, geometry and w_scale the file carries"};

struct Params {
  std::filesystem::path path;
};

inline const StageDecl<Params> decl{
    .type = "io.write_seeds",
    .summary = "write visibilities and a kernel stack in the gridding memos' binary format",
    .doc = "Writes the format of shared/WPROJ.md that io.read_seeds reads: the stack's supports and oversample, "
           "conv_size_half = the largest compacted quarter side (o/2 + o s_max + 1), each plane's compacted "
           "quarter in the top-left corner of its conv_size_half^2 block (zeros elsewhere, which no gridder reads), "
           "then every visibility's uu, vv, ww, vis and weight in stream order, and the stack's cell size, w_scale "
           "and grid size. The kernels are written as they are (kernels.wproj's are normalised so plane 0 sums to "
           "1), so reading the file back gives the same stack and grid. The arrays are spilled block by block to "
           "files beside the output and joined at the end: memory stays bounded by one block. More than 2^31 - 1 "
           "visibilities (the format's int32 count) is an input error. The file appears only when the whole run "
           "succeeds. Tested by writing io.simulate's tiny preset with kernels.wproj's stack and reading it back "
           "through io.read_seeds: the same visibilities, kernels and grid.",
    .inputs = {vis, kernels},
    .params = {{&Params::path,
                {.name = "path", .doc = "output file", .required = true, .role = PathRole::output}}},
};

StageSpec spec();

}  // namespace uvflow::io_write_seeds
