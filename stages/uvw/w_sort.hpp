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
    .doc = "the block with coords set, sorted by w-plane; off-grid visibilities last, with plane -1"};

struct Params {
  std::string within_plane = "input";
};

inline const StageDecl<Params> decl{
    .type = "uvw.w_sort",
    .summary = "place visibilities on the grid once and sort each block by w-plane",
    .doc = "Computes, once per visibility, where it lands on the grid of the kernel stack (DESIGN.md conventions: "
           "pos_u = -uu*scale, pos_v = vv*scale, cell = round(pos) + grid_size/2, plane = round(sqrt(|ww|*w_scale)) "
           "clamped to the last plane, sub-cell offsets round((round(pos) - pos)*oversample), kernel conjugated "
           "when ww > 0) and stores it in the block's `coords` with the plane's support, so later stages never "
           "recompute it. The block is reordered by w-plane with a stable sort: every array (uu, vv, ww, vis, weight, "
           "coords) moves; the optional per-row arrays (antenna1, antenna2, channel, time) are left empty. "
           "Visibilities whose (2s+1)^2 footprint would leave the grid stay in the block, after the last plane in "
           "input order, with coords.plane = -1 (on every backend: a device sort cannot shrink a block without a "
           "round trip to the host); every consumer skips them and the gridders count them as skipped; `skipped` is "
           "the input's. Non-finite uvw is an input error naming the block and the visibility. "
           "cpu: a counting sort, parallel over chunks of the block (the output does not depend on the thread count), "
           "then with within_plane cell a stable sort of each plane's run by Morton index, parallel over planes; "
           "the error stops the run at the block. "
           "cuda: a CUB radix sort of (plane, index) pairs on the device, keys only as wide as the plane count needs "
           "(and the Morton index below the plane with within_plane cell); "
           "the host never reads the block, so non-finite uvw is counted on the device (and placed off the grid) and "
           "the error, naming the first such visibility, is raised at the end of the stream (one read-back). Both "
           "backends give the same blocks, in the same order, with identical coords. "
           "Tested: cpu against an independent double-precision placement, including visibilities just inside and "
           "just outside the grid edges and rounding ties, and its order within planes (cell: against a Morton index "
           "made bit by bit); cuda against cpu, with either order, on random and edge cases.",
    .inputs = {vis_in, kernels},
    .outputs = {vis_out},
    .params = {{&Params::within_plane,
                {.name = "within_plane",
                 .choices = {"input", "cell"},
                 .doc = "the order inside each plane: input, the input's (the sort is stable); cell, the Morton "
                        "order of the visibilities' grid cells (stages/shared/locality_key.hpp), input order among "
                        "equal cells: the order the uvflow walkers (degrid.wproj and grid.atomic, variant uvflow) "
                        "visit a plane in, so they use the block as it is instead of sorting it on every pass (the "
                        "sort here costs more key bits: 2 per bit of the grid size)"}}},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();

// The sorted block's shell, the same on both backends: `in`'s metadata, placement fields from the
// kernels, the order inside planes, and fresh arrays of in.size() from `alloc` (host or device), to
// be filled in sorted order.
template <class Alloc>
std::shared_ptr<VisBlock> sorted_shell(const VisBlock& in, const KernelStack& ks, bool cell_order, Alloc&& alloc) {
  const std::size_t n = in.size();
  auto out = std::make_shared<VisBlock>();
  out->obs = in.obs;
  out->index = in.index;
  out->skipped = in.skipped;  // the off-grid ones stay in the block, marked
  out->grid_size = ks.geom.grid_size;
  out->max_support = ks.max_support;
  out->cell_order = cell_order;
  out->uu = alloc(float{}, n);
  out->vv = alloc(float{}, n);
  out->ww = alloc(float{}, n);
  out->vis = alloc(cfloat{}, n);
  out->weight = alloc(float{}, n);
  out->coords = alloc(GridCoord{}, n);
  return out;
}
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/uvw/w_sort.cu
#endif

}  // namespace uvflow::uvw_w_sort
