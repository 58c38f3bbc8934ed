// The complex uv grid as a file, so that any gridder's grid can be compared cell by cell with
// another's, or with the seeds' expected outputs (stages/io/seeds_format.hpp).
#pragma once

#include <filesystem>
#include <string>

#include "runtime/payloads/grid.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_write_grid {

inline constexpr In<Grid> grid{
    .name = "grid", .arity = Arity::once, .residency = Residency::host, .doc = "the accumulated grid and its totals"};

struct Params {
  std::filesystem::path path;
  std::string format = "auto";
};

// The format `format` names, or for "auto" the one the path's extension does: .npy is npy,
// anything else the seeds' expected-output format.
std::string format_for(const Params& p);

inline const StageDecl<Params> decl{
    .type = "io.write_grid",
    .summary = "write the complex uv grid as .npy or in the seeds' expected-output format",
    .doc = "npy: a NumPy array, complex64, C order, shape [grid_size, grid_size], row v, column u (numpy.load "
           "reads it). seeds: the gridding memos' expected-output file (shared/WPROJ.md): int32 num_skipped, "
           "float64 norm, int32 grid_size, complex64 grid[grid_size][grid_size], little-endian, no padding, "
           "with the gridder's norm and skipped count. The grid is written as gridded, not divided by the norm. "
           "The file is written under a temporary name and appears only when the whole run succeeds. Tested by "
           "reading both formats back and comparing with the grid written.",
    .inputs = {grid},
    .params = {{&Params::path,
                {.name = "path", .doc = "output file", .required = true, .role = PathRole::output}},
               {&Params::format,
                {.name = "format", .choices = {"auto", "npy", "seeds"},
                 .doc = "file format; auto: npy for a .npy path, else the seeds' expected-output format"}}},
};

StageSpec spec();

}  // namespace uvflow::io_write_grid
