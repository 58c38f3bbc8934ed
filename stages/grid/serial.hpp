#pragma once

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/grid/grid_shape.hpp"

namespace uvflow::grid_serial {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "visibilities, in any order"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .doc = "quarter kernels, supports, grid geometry"};
inline constexpr Out<Grid> grid{
    .name = "grid", .arity = Arity::once, .doc = "the accumulated grid, norm, gridded and skipped counts"};

struct Params {
  std::string kernel_lookup = "nearest";
  std::string accumulate = "float";
};

inline const StageDecl<Params> decl{
    .type = "grid.serial",
    .summary = "serial reference gridder (NAG memo Listing 1): one visibility at a time, no sorting",
    .doc = "Convolves each visibility with its w-plane's kernel onto a single-precision grid exactly as the serial "
           "code of the NAG memo does: for j, k in [-s, s], C = K[plane][|off_v + j*o|][|off_u + k*o|] from the "
           "quarter kernels, conjugated when ww > 0, grid[v+j][u+k] += (vis*weight) * C, norm += weight * sum "
           "Re(C) in double. Positions, planes and offsets follow the DESIGN.md conventions (the same placement as "
           "uvw.w_sort). Visibilities whose footprint would leave the grid are skipped and counted. The slow, plain "
           "yardstick the other gridders are checked and timed against; it is itself tested against an independent "
           "double-precision loop (relative Frobenius norm of the grid below 1e-5, same norm and skipped count). With "
           "`accumulate: double` the products and sums are in double and the grid is rounded to float once at the end: "
           "a reference for data sets so large that Listing 1's float sums drift (on EL30-56's 5.7e10 updates the GPU "
           "gridders' grids, summed in short runs, differ from the float one by 1.7e-4: "
           "bench/results/h100_variants.md).",
    .inputs = {vis, kernels},
    .outputs = {grid},
    .params = {{&Params::kernel_lookup,
                {.name = "kernel_lookup",
                 .choices = {"nearest", "linear"},
                 .doc = "nearest: Listing 1's table sample at the rounded sub-cell offset; linear: the table "
                        "interpolated bilinearly at the visibility's exact offset (the adjoint of degrid.serial's "
                        "and degrid.wproj's linear lookup)"}},
               {&Params::accumulate,
                {.name = "accumulate",
                 .choices = {"float", "double"},
                 .doc = "float: Listing 1's single-precision grid, each update added in float; double: each update's "
                        "product and sum in double, the grid rounded to float when the last block is in (16 bytes per "
                        "grid cell more)"}}},
    .describe = [](const Params&, const PortShapes& in) { return grid_shape(in, kernels.name, grid.name); },
};

StageSpec spec();

}  // namespace uvflow::grid_serial
