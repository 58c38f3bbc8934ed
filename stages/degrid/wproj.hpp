#pragma once

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::degrid_wproj {

inline constexpr In<VisBlock> vis{
    .name = "vis", .doc = "visibilities to predict, in any order; placed ones (uvw.w_sort) reuse their coords"};
inline constexpr In<Grid> grid{.name = "grid", .arity = Arity::once, .doc = "the model grid (fft.image_to_grid)"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .doc = "kernel stack with its rows layout (kernels.wproj layouts: rows or all)"};
inline constexpr Out<VisBlock> model{
    .name = "vis", .doc = "the same block, in the same order, with `vis` replaced by the predicted visibilities"};

struct Params {
  std::string variant = "uvflow";
  std::string kernel_lookup = "nearest";
};

inline const StageDecl<Params> decl{
    .type = "degrid.wproj",
    .summary = "fast w-projection degridder: predicts visibilities from a model grid, in parallel",
    .doc = "The transpose of the gridders: each visibility gathers G[v+j][u+k] * conj(C) over its footprint, C the "
           "w-plane kernel the gridder would add with (conjugated when ww > 0), so degridding is the adjoint of "
           "gridding: <degrid(G), V> = <G, grid(V)> with unit weights, to float rounding. A gather has no write "
           "conflicts, so the cpu backend splits the block over all threads and reads each footprint row with unit "
           "stride from the kernel stack's rows layout (vectorised). Placed blocks (uvw.w_sort) reuse their coords; "
           "raw ones are placed here with the same conventions. Visibilities whose footprint would leave the grid "
           "predict 0. The output keeps the block's order and its other arrays (antennas, times, channels), so "
           "io.write_ms can write it into a Measurement Set column. Tested against degrid.serial (relative RMS below "
           "1e-5), the adjointness identity on random grids and visibilities, and a direct DFT of point sources.",
    .inputs = {vis, grid, kernels},
    .outputs = {model},
    .params = {{&Params::variant,
                {.name = "variant",
                 .choices = {"uvflow", "gather", "scatter", "moving_window"},
                 .doc = "cuda designs (stages/degrid/wproj.cu): gather, the degridding report's warp per visibility "
                        "over the quarter kernels; scatter, the report's alternative (thread blocks own 32 x 16 grid "
                        "tiles, visibilities bucketed by tile, atomic adds per tile row); moving_window, Romein's "
                        "per-baseline window (a warp follows one baseline through the block's time block in time "
                        "order, reading a grid cell only when the track moves onto it; needs raw blocks with "
                        "antenna1, antenna2 and non-decreasing time, so not uvw.w_sort's output, and assumes a "
                        "baseline moves little between dumps: it is correct in any case, only slower); uvflow, ours "
                        "(the quarter kernels with their rows in residue order, made on the device; the block "
                        "visited in (w-plane, Morton cell) order, sorted on the device unless uvw.w_sort "
                        "left it so (within_plane: cell), cut into "
                        "ranges of equal work that a few SMs share so that kernel rows are reread from L1, and "
                        "up to 6 visibilities of one plane a few cells apart (with the others at their cells and sub-cell "
                        "offsets, which share their predictions) degridded together by a warp that loads "
                        "each grid value of their footprints' union once for all of them; any input order, the "
                        "output in the input's order; with kernel_lookup linear, 8 to 32 lanes per visibility by "
                        "support). The cpu backend has one design (uvflow)"}},
               {&Params::kernel_lookup,
                {.name = "kernel_lookup",
                 .choices = {"nearest", "linear"},
                 .doc = "nearest: the table sample at the rounded sub-cell offset, as the gridders read it (the "
                        "transpose of grid.tiled); linear: the table interpolated bilinearly at the visibility's exact "
                        "offset, which removes the nearest sample's position error of up to 1/(2 oversample) cell "
                        "(bench/results/degrid_accuracy.md); placed blocks are read from uu, vv for it"}}},
    // Serial: the cuda backend's blocks run on one stream anyway, and blocks enqueued from concurrent
    // invocations make the report's per-block device intervals overlap (sums up to 4x too long);
    // the cpu backend already spreads each block over every thread.
    .concurrency = Concurrency::serial,
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/degrid/wproj.cu
#endif

}  // namespace uvflow::degrid_wproj
