// Placement (stages/shared/placement.hpp) is the one implementation of the conventions of
// DESIGN.md; the gridders that take raw visibilities (grid.serial, grid.atomic) use it too.
#pragma once

#include <memory>

#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::uvw_w_sort {

inline constexpr In<VisBlock> vis_in{.name = "vis", .doc = "raw visibilities (uu, vv, ww in wavelengths)"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once,
    .doc = "kernel stack: grid geometry, oversample, w_scale and per-plane supports"};
inline constexpr Out<VisBlock> vis_out{
    .name = "vis",
    .doc = "the block with coords set, sorted by w-plane; off-grid visibilities removed and counted (cpu) or "
           "last with plane -1 (cuda)"};

struct Params {};

inline const StageDecl<Params> decl{
    .type = "uvw.w_sort",
    .summary = "place visibilities on the grid once and sort each block by w-plane",
    .doc = "Computes, once per visibility, where it lands on the grid of the kernel stack (DESIGN.md conventions: "
           "pos_u = -uu*scale, pos_v = vv*scale, cell = round(pos) + grid_size/2, plane = round(sqrt(|ww|*w_scale)) "
           "clamped to the last plane, sub-cell offsets round((round(pos) - pos)*oversample), kernel conjugated "
           "when ww > 0) and stores it in the block's `coords` with the plane's support, so later stages never "
           "recompute it. The block is reordered by w-plane with a stable sort: every array (uu, vv, ww, vis, weight, "
           "coords) moves; the optional per-row arrays (antenna1, antenna2, channel, time) are left empty. "
           "cpu: a counting sort, parallel over chunks of the block (the output does not depend on the thread count); "
           "visibilities whose (2s+1)^2 footprint would leave the grid are removed and counted in `skipped`; "
           "non-finite uvw stops the run with an error naming the visibility. "
           "cuda: a CUB radix sort of (plane, index) pairs on the device, keys only as wide as the plane count needs; "
           "the host never reads the block, so it cannot size a smaller one: visibilities off the grid stay, sorted "
           "after the last plane in input order, with coords.plane = -1, and every consumer skips them (gridders count "
           "them as skipped); `skipped` is the input's. A kernel cannot raise an error, so non-finite uvw is treated "
           "as off the grid. The visibilities on the grid come out in the cpu backend's order with identical coords. "
           "Tested: cpu against an independent double-precision placement, including visibilities just inside and "
           "just outside the grid edges and rounding ties; cuda against cpu on random and edge cases.",
    .inputs = {vis_in, kernels},
    .outputs = {vis_out},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/uvw/w_sort.cu
#endif

}  // namespace uvflow::uvw_w_sort
