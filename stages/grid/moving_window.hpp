// grid.moving_window: Romein's moving-window gridder (2012) as the OxfordSKA memo adapted it
// (001_55d00877663aa4fc.txt, Part II): visibilities grouped by baseline and block of time steps,
// w taken constant within a group, so one kernel (one support) serves the whole group.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/grid/grid_shape.hpp"

namespace uvflow::grid_moving_window {

inline constexpr In<VisBlock> vis{
    .name = "vis",
    .doc = "raw visibility blocks in time order, with antenna1, antenna2, time and channel (io.simulate, io.read_ms)"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .doc = "w-projection kernels; their geometry sets the grid size and cell"};
inline constexpr Out<Grid> grid{
    .name = "grid",
    .arity = Arity::once,
    .doc = "the gridded visibilities of every block, with totals [norm, gridded, skipped]"};

struct Params {
  std::int64_t time_block = 10;
};

inline const StageDecl<Params> decl{
    .type = "grid.moving_window",
    .summary = "Romein's moving-window gridder: one w per baseline and block of time_block dumps",
    .doc =
        "The memo's variant of grid.tiled's problem, but a stage of its own: it reads raw [dump][baseline][channel] "
        "VisBlocks with their antenna1, antenna2, time and channel labels (not tile buckets, not uvw.w_sort's "
        "output), in time order. Within each block, the visibilities of one baseline and channel in consecutive "
        "groups of time_block dumps (dumps counted from the block's first time) are gridded with the w-plane, "
        "support and conjugation of the group's mean w, each at its own u, v and sub-cell offsets; time_block 1 "
        "is exact (grid.serial's placement). On EL56-82 the grid's relative error against time_block 1 is 0.23 % at "
        "10 dumps (the memo, taking the first dump's w: 0.74 %), and the worst source peak of a 6-degree field "
        "moves by 4.7 % of its flux (bench/results/moving_window_accuracy.md). Groups never span "
        "VisBlocks, so dumps_per_block should be a multiple of time_block. Visibilities whose footprint leaves the "
        "grid are skipped and counted; totals are [norm, gridded, skipped] as grid.atomic's, so fft.grid_to_image "
        "and image.grid_correct follow unchanged. "
        "cpu: the reference for the approximation: groups formed by sorting their keys, then Listing 1's loop "
        "with each group's w, serial. "
        "cuda: Romein's design: the keys sorted on the device, a thread block per group; each thread owns points "
        "of the (2s+1)^2 support window (the grid cell congruent to its point modulo 2s+1 under the footprint) "
        "and walks the group's visibilities in time order, accumulating in registers while the baseline's track "
        "keeps its cell and committing with one atomic add when the cell changes. Grid and totals stay on the "
        "device; the only wait is for the pinned copy of the keys two blocks earlier. "
        "Tested: cpu at time_block 1 against grid.serial, cpu at larger blocks against Listing 1 fed each group's "
        "mean w, cuda against cpu (relative Frobenius norm below 1e-5). Work: cpu reports visibilities and "
        "kernel-point updates, cuda visibilities only (as grid.atomic).",
    .inputs = {vis, kernels},
    .outputs = {grid},
    .params = {{&Params::time_block,
                {.name = "time_block",
                 .min = 1.0,
                 .max = 1e6,
                 .doc = "dumps per w-block: a baseline's visibilities in each group of this many dumps share the "
                        "group's mean w (1: exact)"}}},
    .concurrency = Concurrency::serial,
    .describe = [](const Params&, const PortShapes& in) { return grid_shape(in, kernels.name, grid.name); },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/grid/moving_window.cu
#endif

}  // namespace uvflow::grid_moving_window
