#pragma once

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::degrid_serial {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "visibilities to predict, in any order (placed or not)"};
inline constexpr In<Grid> grid{.name = "grid", .arity = Arity::once, .doc = "the model grid (fft.image_to_grid)"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .doc = "quarter kernels, supports, grid geometry"};
inline constexpr Out<VisBlock> model{
    .name = "vis", .doc = "the same block, in the same order, with `vis` replaced by the predicted visibilities"};

struct Params {
  std::string kernel_lookup = "nearest";
};

inline const StageDecl<Params> decl{
    .type = "degrid.serial",
    .summary = "serial reference degridder: the transpose of the NAG memo's Listing 1, one visibility at a time",
    .doc = "Predicts each visibility from a model grid by reading its w-plane's kernel footprint: for j, k in [-s, s], "
           "V += G[v+j][u+k] * conj(C), C = K[plane][|off_v + j*o|][|off_u + k*o|] from the quarter kernels, itself "
           "conjugated when ww > 0 exactly as grid.serial does, so the two are adjoint (<degrid(G), V> = <G, grid(V)> "
           "with unit weights). Positions, planes and offsets are the DESIGN.md conventions. Visibilities whose "
           "footprint would leave the grid predict 0. The block keeps its order and every other array, so a "
           "Measurement Set writer can put the model back into its rows. The plain yardstick degrid.wproj is "
           "checked against; tested against a direct DFT of point sources and by the adjointness identity.",
    .inputs = {vis, grid, kernels},
    .outputs = {model},
    .params = {{&Params::kernel_lookup,
                {.name = "kernel_lookup",
                 .choices = {"nearest", "linear"},
                 .doc = "nearest: the table sample at the rounded sub-cell offset, as the gridders read it (the exact "
                        "transpose of grid.serial); linear: the table interpolated bilinearly at the visibility's exact "
                        "offset, which removes the nearest sample's position error of up to 1/(2 oversample) cell"}}},
};

StageSpec spec();

}  // namespace uvflow::degrid_serial
