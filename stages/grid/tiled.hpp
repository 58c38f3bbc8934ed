// grid.tiled: the fast CPU gridder (NAG memo sections 3.3-3.4 and 4.2-4.4): tiles of the grid
// gridded in parallel, each tile owned by one task, and a dense central box split into fixed parts,
// each gridded into a copy of its own. The cuda backend's three designs are in stages/grid/tiled.cu.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/tiles.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/grid/grid_shape.hpp"

namespace uvflow::grid_tiled {

inline constexpr In<TileBuckets> buckets{
    .name = "buckets", .doc = "per-tile visibility lists with the placed, w-sorted block they index"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once,
    .doc = "kernel stack with its rows layout (cpu) or gpu layouts (cuda) and footprint sums; its Chebyshev fit for "
           "variant chebyshev"};
inline constexpr Out<Grid> grid{
    .name = "grid", .arity = Arity::once, .doc = "the accumulated grid, norm, gridded and skipped counts"};

struct Params {
  std::string variant = "uvflow";
  std::int64_t central_box = 2;
  std::string accumulate = "float";
  std::int64_t entries_per_item = 256;
  std::int64_t register_columns = 8;
  std::int64_t nag_blocks_per_tile = 16;
  std::int64_t nag_blocks_per_central_tile = 1000;
};

inline const StageDecl<Params> decl{
    .type = "grid.tiled",
    .summary = "fast CPU gridder: tiles gridded in parallel, largest first, with a shared dense central box",
    .doc =
        "Grids the bucket-sorted blocks of tiles.bucket_sort (NAG memo sections 3.3-3.4, 4.2-4.4). Each tile outside "
        "the central box is gridded by one task, so no two threads write one cell and no atomics are needed; tiles "
        "are taken from a queue sorted by their work (the clipped footprint areas of their visibilities, not their "
        "counts), largest first. Every footprint is clipped to the tile, and the kernel is read through the `rows` "
        "layout of the kernel stack, so the inner loop along u is unit-stride and vectorised. The central box, the "
        "(2W+1)^2 tiles around the tile holding the grid centre where the short baselines pile up, would serialise "
        "on its few tiles: its visibilities are instead split into 16 fixed parts gridded in parallel, each adding "
        "into its own copy of the box, and the copies are summed into the grid afterwards in part order (Listing 11, "
        "with parts instead of threads so that the grid is bit-for-bit the same on any number of threads); it runs "
        "alongside the outer tiles. Updates are grid += (vis*weight)*C with C conjugated when ww > 0, in single precision with "
        "grid.serial's operation order; with `accumulate: double` only within a block, each block's share of a tile "
        "(or of the central box) then being added into a double-precision grid, rounded to float once (see the "
        "parameter). The norm is sum of weight * footprint_sum in double. Tested with the whole "
        "chain (uvw.w_sort, uvw.bounding_box, tiles.count, tiles.bucket_sort) against an independent "
        "double-precision Listing 1: relative Frobenius norm below 1e-5, same norm and skipped count, for several "
        "tile sizes and central boxes, grid edges, w of both signs, a dense core and several blocks. "
        "The cuda backend (kernel stack built with layouts: gpu) has three designs, chosen by `variant`: nag "
        "(000 memo 3.2-3.5: a fixed number of blocks per tile, more for the central box, 32 x 2 threads owning "
        "column strips of 32 x 32 tiles in registers and shared memory, NAG's reordered kernel layout), nvidia "
        "(001 memo 3-4: 32-thread blocks taking chunks of 32 entries from a global counter, each thread owning a "
        "column of a 32 x 16 tile in registers, written back when the tile changes, OERC kernel layout), and "
        "uvflow (a warp owns a 32 x 16 or 32 x 32 tile for a work item of at most entries_per_item entries, so a "
        "dense tile is split over many warps; footprints at least register_columns wide accumulate in registers, "
        "each lane owning a tile column; narrower ones go to a shared-memory tile, 32/C rows of C columns at a time, "
        "so they keep the warp busy; one atomic per touched cell per item). Each "
        "is tested against the cpu backend on the same buckets: relative Frobenius norm below 1e-5, same norm, "
        "gridded and skipped counts. Variant chebyshev (both backends; SDP Memo 73, the seeds' 004) is the uvflow "
        "design (cpu: the tiles above; cuda: the warp per work item) with each kernel value evaluated on the fly from "
        "the stack's Chebyshev fit (kernels.wproj chebyshev: N) instead of read from the table: Clenshaw's recurrence "
        "in float at the point's distance from the visibility, r^2 = dx^2 + dy^2 with (dx, dy) = (off_u + k o, "
        "off_v + j o) / o cells (the sub-cell offsets of the placement, so the two variants differ by the fit alone), "
        "zero beyond the fit's radius s + 1/2; the norm comes from the fit's footprint sums. The cpu backend is the "
        "cuda one's reference (relative Frobenius norm below 1e-5 against each other, and against a serial Listing 1 "
        "with the fitted kernel); a stack without a fit is refused.",
    .inputs = {buckets, kernels},
    .outputs = {grid},
    .params = {{&Params::variant,
                {.name = "variant",
                 .choices = {"uvflow", "nvidia", "nag", "chebyshev"},
                 .doc = "the design (see above); nvidia and nag are the seeds' GPU designs, cuda only; chebyshev "
                        "is uvflow with kernels evaluated from their Chebyshev fit (needs kernels.wproj chebyshev)"}},
               {&Params::central_box,
                {.name = "central_box",
                 .unit = "tiles",
                 .min = -1,
                 .max = 100000,
                 .doc = "radius W of the central box: the (2W+1)^2 tiles around the tile holding the grid centre are "
                        "gridded in parallel into copies of the box (cpu: 16 copies, one per fixed part), "
                        "or by nag_blocks_per_central_tile blocks each (nag); -1: no central box. 2 suits 64 x 64 "
                        "tiles on SKA-like data (NAG used 6 x 6 tiles)"}},
               {&Params::accumulate,
                {.name = "accumulate",
                 .choices = {"float", "double"},
                 .doc = "cpu: float: every block adds into the float grid, so the grid depends on the order of "
                        "the blocks and, under mpirun, on the number of ranks (about 1e-5 of the image's peak); "
                        "double: each block's share of a tile is added into a double grid, rounded to float once, "
                        "and mpi.reduce_grid sums the ranks' double grids: the image does not depend on how the "
                        "blocks are spread over MPI ranks (the *_mpi.yaml pipelines set it; docs/distributed.md). "
                        "It costs 16 bytes per grid cell the blocks reach, and the time to add each block's tiles "
                        "into it: nothing measurable on the synthetic preset, 4 to 17 % of grid.tiled's time on "
                        "EL56-82 (few updates per cell per block) on 2 cores (bench/results/mpi_cpu.md). cuda: "
                        "float: every write-back (an item's tile, a flush) is a float atomic, in whatever order the "
                        "warps reach it; double: two double atomics into a double grid on the device (16 bytes a "
                        "cell more), rounded once, and kept for mpi.reduce_grid under mpirun. With the buckets in "
                        "visibility order (tiles.bucket_sort order: visibility) uvflow's and chebyshev's items are "
                        "fixed by the data, so their grid does not depend on the order of blocks, items or ranks "
                        "(mpirun -np 2 and 3 on one H100 gave one process's image bit for bit); nvidia's and nag's "
                        "partial sums still depend on the schedule. Costs 5-18 % of the gridding time on EL56-82 (H100)"}},
               {&Params::entries_per_item,
                {.name = "entries_per_item",
                 .unit = "entries",
                 .min = 1,
                 .max = 1 << 20,
                 .doc = "uvflow: the most entries of one tile a warp grids before writing the tile back; smaller "
                        "splits dense tiles finer, larger writes back less often"}},
               {&Params::register_columns,
                {.name = "register_columns",
                 .unit = "cells",
                 .min = 1,
                 .max = 33,
                 .doc = "uvflow: footprints at least this many columns wide (clipped to the tile) are gridded in "
                        "registers, narrower ones in shared memory; 33: all in shared memory"}},
               {&Params::nag_blocks_per_tile,
                {.name = "nag_blocks_per_tile",
                 .min = 1,
                 .max = 1 << 16,
                 .doc = "nag: thread blocks per tile outside the central box (the memo's 16)"}},
               {&Params::nag_blocks_per_central_tile,
                {.name = "nag_blocks_per_central_tile",
                 .min = 1,
                 .max = 1 << 20,
                 .doc = "nag: thread blocks per tile of the central box (the memo's 1000)"}}},
    .concurrency = Concurrency::serial,
    .describe = [](const Params&, const PortShapes& in) { return grid_shape(in, kernels.name, grid.name); },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/grid/tiled.cu
#endif

}  // namespace uvflow::grid_tiled
