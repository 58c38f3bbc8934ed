#pragma once

#include <memory>

#include "runtime/payloads/tiles.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::uvw_bounding_box {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "a block placed by uvw.w_sort"};
inline constexpr Out<BoundingBox> box{.name = "box", .doc = "inclusive cell range of all footprints"};

struct Params {};

inline const StageDecl<Params> decl{
    .type = "uvw.bounding_box",
    .summary = "the inclusive range of grid cells a placed block's footprints touch",
    .doc = "For a block placed by uvw.w_sort, the smallest box of grid cells holding every footprint of a visibility "
           "on the grid (cell +- support of its w-plane, inclusive; visibilities marked off the grid, plane -1, are "
           "left out): the active grid that tiles.count covers with tiles. A block with no visibility on the grid "
           "gives the empty box [1, 0, 1, 0]. "
           "cpu: a parallel reduction over the block. "
           "cuda: each thread block reduces 4096 visibilities and folds its extent into the device-resident box with "
           "atomicMin/atomicMax, from INT_MAX/INT_MIN sentinels that a last one-thread kernel turns into the empty "
           "box if nothing was found; the host never reads the box. "
           "Tested: cpu against a plain loop over the block, cuda against cpu.",
    .inputs = {vis},
    .outputs = {box},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/uvw/bounding_box.cu
#endif

}  // namespace uvflow::uvw_bounding_box
