// The distributed half of imaging: each rank grids its share of the visibilities (a source's
// `share` parameter), this stage sums the grids onto rank 0, and the stages after it (the FFT, the
// writers) run on rank 0 alone. MPI itself is behind runtime/dist.hpp.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/payloads/grid.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::mpi_reduce_grid {

inline constexpr In<Grid> grid_in{
    .name = "grid", .arity = Arity::once,
    .doc = "this rank's grid: a gridder's, over this rank's share of the visibilities"};
inline constexpr Out<Grid> grid_out{
    .name = "grid", .arity = Arity::once,
    .doc = "on rank 0: the sum of every rank's grid (cells, norm, gridded and skipped counts); on the other ranks "
           "their own grid, which nothing consumes there"};

struct Params {
  std::int64_t chunk_mb = 64;
};

inline const StageDecl<Params> decl{
    .type = "mpi.reduce_grid",
    .summary = "sum the grids of every MPI rank onto rank 0 (mpirun -np N uvflow run); the stages after it run on rank 0 only",
    .doc = "In a run of N MPI ranks (docs/distributed.md), each rank has gridded its share of the visibilities into a "
           "grid of its own; this stage sums them onto rank 0, cells and totals (the weight norm, the gridded and "
           "skipped counts), in chunks of at most chunk_mb megabytes, so that no buffer of the whole grid is needed "
           "besides the sum; rank 0 holds its own grid and the sum, the other ranks nothing more than their "
           "grid. Its output exists on rank 0 only: the stages it feeds, directly or not, run on rank 0, and the other "
           "ranks leave them out of their plan (`uvflow run` does this; `uvflow check` and `plan` show the whole "
           "pipeline). In a run of one process the grid passes through unchanged (nothing is copied). The cpu "
           "backend sums host grids (a cuda gridder's grid comes down through the transfer the planner inserts). The "
           "cuda backend sums device grids on rank 0's device through CUDA IPC, so no grid crosses to the host, and "
           "only over the rectangle that holds every rank's non-zero cells (found on the device; the cells beyond the "
           "longest baseline stay zero): each other rank copies its rows of it, chunk_mb at a time, into a staging "
           "buffer rank 0 has mapped, and rank 0 adds them in rank order (ranks on other GPUs through peer access, ranks sharing a GPU through its own "
           "memory); it needs every rank on one node and refuses a job that spans several. When every rank's gridder kept its grid in double (accumulate: double in grid.tiled's cpu "
           "backend, as the *_mpi.yaml pipelines set, or in grid.atomic) the double grids "
           "are summed, in double, and rounded to float once on rank 0 (8 bytes per float of the grid on the wire): the "
           "image does not depend on the number of ranks (np 1, 2 and 4 give one process's image, bit for bit, in "
           "tests/mpi_test.sh, which allows 1e-6 of the peak). Other gridders' float grids are summed in float, in "
           "MPI's order (4 bytes per float): images from 1, 2 and 4 ranks then differ by about 1e-5 of the peak. "
           "More visibilities "
           "gridded (and skipped) over the ranks than the visibility set has is an error: a source feeding the "
           "gridder was left at share: none, so every rank gridded every visibility.",
    .inputs = {grid_in},
    .outputs = {grid_out},
    .params = {{&Params::chunk_mb,
                {.name = "chunk_mb", .unit = "MB", .min = 1.0, .max = 2047.0,
                 .doc = "the largest piece of the grid (in double, or float) one MPI_Reduce (cpu) or one staging buffer (cuda) "
                         "holds"}}},
    .concurrency = Concurrency::serial,
    .output_on_root = true,
    .describe = [](const Params&, const PortShapes& in) {
      auto it = in.find(grid_in.name);
      return it == in.end() ? PortShapes{} : PortShapes{{std::string(grid_out.name), it->second}};
    },
};

StageSpec spec();
std::unique_ptr<Stage> make_cuda();

// A source left at share: none makes every rank grid every visibility: the image, normalised by
// the summed weights, would look right, so the summed counts (totals: norm, gridded, skipped) are
// what can tell. Throws InputError then.
void check_counted_once(const double* totals, const Observation* obs);
// Cells [u0, u1] x [v0, v1] of a grid (inclusive); empty when u1 < u0.
struct Rectangle {
  std::int64_t u0, v0, u1, v1;
  bool empty() const { return u1 < u0; }
};
// What both backends sum: the double cells when every rank has them (a rank whose grid is zero,
// having gridded nothing, counts), else the float cells; and the rectangle holding every rank's
// non-zero cells (beyond the longest baseline a grid stays zero: only this part is summed). Every
// rank calls it with whether it has double cells and the rectangle of its own non-zero cells;
// rank 0 says what is summed of the n x n grid of `stage`.
struct SumPlan {
  bool exact;
  Rectangle cells;
};
SumPlan plan_sum(bool has_double_cells, Rectangle mine, int n, const std::string& stage);

}  // namespace uvflow::mpi_reduce_grid
