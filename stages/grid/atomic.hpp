// grid.atomic: convolutional gridding of unsorted visibilities, one visibility at a time, with
// atomic grid updates (NAG memo 000_21de45a10be372d0.txt: Listing 9 on the CPU, Listing 4 on the
// GPU). The baseline the sorted and tiled gridders are measured against.
#pragma once

#include <cstdint>
#include <memory>

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

struct Params {};

inline const StageDecl<Params> decl{
    .type = "grid.atomic",
    .summary = "convolutional gridding of unsorted visibilities, one at a time, with atomic grid updates",
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
        "Tested: cpu against a double-precision Listing 1 (random kernels, edge visibilities, both signs of w, "
        "thousands of visibilities in one cell), cuda against cpu. "
        "Work: cpu reports visibilities and kernel-point updates; cuda reports visibilities only, since the "
        "supports are read on the device and counting updates would need a host synchronisation (the count equals "
        "the cpu backend's on the same data). "
        "Non-finite uvw: the cpu backend stops with an error naming the visibility, as uvw.w_sort and grid.serial "
        "do; a kernel cannot raise one, so the cuda backend counts it as skipped.",
    .inputs = {vis, kernels},
    .outputs = {grid},
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
