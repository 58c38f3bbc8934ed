// grid.atomic: convolutional gridding of visibilities in any order with atomic grid updates: the
// NAG memo's (000_21de45a10be372d0.txt: Listing 9 on the CPU, Listing 4 on the GPU), the baseline
// the sorted and tiled gridders are measured against, and on the GPU uvflow's fastest gridder
// (variant uvflow: visibilities gridded in groups, one atomic per grid point of a group).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/grid/grid_shape.hpp"

namespace uvflow::grid_atomic {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "visibilities in any order (uu, vv, ww in wavelengths)"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .doc = "w-projection kernels; their geometry sets the grid size and cell"};
inline constexpr Out<Grid> grid{
    .name = "grid",
    .arity = Arity::once,
    .doc = "the gridded visibilities of every block, with totals [norm, gridded, skipped]"};

struct Params {
  std::string variant = "listing";
  std::string accumulate = "float";
  std::int64_t double_box = 64;
};

inline const StageDecl<Params> decl{
    .type = "grid.atomic",
    .summary = "convolutional gridding of visibilities in any order with atomic grid updates",
    .doc =
        "The first and simplest parallel gridder of the NAG memo, kept as the baseline that the sorted and tiled "
        "gridders are measured against. Each visibility is placed as the serial reference (Listing 1) places it and "
        "convolved with its w-plane's compacted quarter kernel, conjugated for w > 0; visibilities whose footprint "
        "leaves the grid are skipped and counted. The grid's totals are [norm, gridded, skipped], norm being the "
        "weighted sum of the real parts of each footprint (the kernel stack's footprint_sum). "
        "cpu (Listing 9): visibilities in parallel with oneTBB, every grid update an atomic float add; the faithful "
        "CPU counterpart, not a fast path. "
        "cuda (Listing 4): one warp per visibility, its lanes across a kernel row, atomic adds on the grid (one "
        "float2 atomic per cell on sm_90); grid and totals stay on the device and nothing synchronises. "
        "cuda variant uvflow: the degridder's uvflow design transposed (stages/shared/locality_order.cuh): the "
        "block sorted on the device by (w-plane, Morton cell) (unless uvw.w_sort left it so: within_plane: "
        "cell) and cut into ranges of equal work that a few SMs share, then up to 8 visibilities of one plane "
        "and sign of w a few cells apart gridded together by a warp "
        "that walks the union of their footprints and adds the members' sum at each point with one float2 atomic "
        "(visibilities of one cell and sub-cell offset count as one member, their values summed first): "
        "the grid is touched once per union point instead of once per update, with no tile clipping. Kernel "
        "values come from each plane's quarter with its rows in residue order (made on the device once per "
        "stack: a footprint row is two unit-stride runs, and a plane is S(S + 1) values, 2.5 times fewer than the "
        "rows layout, so more of it stays in L1; each row ends in a zero, read by a member whose footprint misses "
        "the lane's column, so the walk tests nothing per member); counts visibilities and updates on the device. Atomic adds make the order of each cell's sum vary run to run (grid.tiled with "
        "tiles.bucket_sort order visibility gives reproducible grids). "
        "Tested: cpu against a double-precision Listing 1 (random kernels, edge visibilities, both signs of w, "
        "thousands of visibilities in one cell; double sums within 2e-7 of it where float sums drift over ten "
        "times further), cuda against cpu with the same sums. "
        "Work: cpu and cuda uvflow report visibilities and kernel-point updates; cuda listing reports visibilities "
        "only, since the supports are read on the device (uvflow counts them there). "
        "Non-finite uvw: the cpu backend stops with an error naming the visibility, as uvw.w_sort and grid.serial "
        "do; a kernel cannot raise one, so the cuda backend counts it as skipped.",
    .inputs = {vis, kernels},
    .outputs = {grid},
    .params = {{&Params::variant,
                {.name = "variant",
                 .choices = {"listing", "uvflow"},
                 .doc = "listing: the memo's listings (cpu: Listing 9, a visibility per thread; cuda: Listing 4, a "
                        "warp per visibility); uvflow: cuda only, visibilities gridded in groups in a locality "
                        "order, one atomic per grid point of a group (stages/grid/atomic.cu)"}},
               {&Params::accumulate,
                {.name = "accumulate",
                 .choices = {"float", "double"},
                 .doc = "float: each update (listing) or each union point's sum (uvflow) is a float atomic add, so a "
                        "cell's value is rounded at every add of a long chain whose order varies run to run (uvflow "
                        "on the el presets: about 1e-5 relative Frobenius from the double-precision Listing 1); "
                        "double: the same adds, products still in float, go into a double grid beside the float one "
                        "(16 more bytes a cell; cuda: two double atomics per add), rounded to float once at the end, "
                        "and mpi.reduce_grid sums the ranks' double grids. Cost and accuracy of both on the H100: "
                        "bench/results/h100.md"}},
               {&Params::double_box,
                {.name = "double_box",
                 .unit = "cells",
                 .min = 0,
                 .max = 512,
                 .doc = "with float sums: the central N x N cells of the grid (where the short baselines pile up) are "
                        "summed in double in an array of their own and rounded into the grid once at the end; 0: "
                        "none. On the el presets the central 64^2 cells hold 99.9 % of the float sums' rounding "
                        "error: grid.atomic uvflow's agreement with the double sums goes from 1.0e-5 .. 1.3e-5 to "
                        "3.2e-7 .. 3.8e-7 for 0.5-2 % of its gridding time (H100, bench/results/"
                        "h100_uvflow_gridder.md). The cuda backend keeps 32 copies of the box (16 bytes a cell each: "
                        "128 MiB at 512, the largest) so that fewer thread blocks contend for each double. With "
                        "accumulate: double every cell is summed in double already"}}},
    .concurrency = Concurrency::serial,
    .describe = [](const Params&, const PortShapes& in) { return grid_shape(in, kernels.name, grid.name); },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/grid/atomic.cu
#endif

// Shared by the two backends.
// Throws, naming the block and the array, unless the block's arrays have one value per
// visibility, the kernel stack's arrays match its planes, and all of them are at `where` (the
// backend's side). Reads no array contents, so it serves device inputs too.
void check_inputs(const VisBlock& block, const KernelStack& ks, Location where);

}  // namespace uvflow::grid_atomic
