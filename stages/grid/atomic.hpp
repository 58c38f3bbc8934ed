// grid.atomic: convolutional gridding of unsorted visibilities, one visibility at a time, with
// atomic grid updates (NAG memo 000_21de45a10be372d0.txt: Listing 9 on the CPU, Listing 4 on the
// GPU). The baseline the sorted and tiled gridders are measured against.
//
//   in   vis      VisBlock, stream, backend residency: raw visibilities, any order
//   in   kernels  KernelStack, once, backend residency: grid geometry, supports, quarter kernels
//   out  grid     Grid, once, backend residency: the sum over every block, emitted at end of stream
//   params: none (the grid geometry is the kernel stack's)
//   backends: cpu  oneTBB over visibilities, std::atomic_ref<float> adds on the grid
//             cuda one warp per visibility, its lanes across k, atomicAdd on float cells (one
//                  float2 atomic per cell on sm_90); only in a build with CUDA
//
// Each visibility is placed as Listing 1 does (place(), stages/uvw/placement.hpp); one whose
// footprint leaves the grid is skipped and counted. Grid::totals = [norm, gridded, skipped], norm
// from KernelStack::footprint_sum.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/payloads/kernels.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec grid_atomic_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_grid_atomic_cuda();  // stages/grid/atomic.cu
#endif

// Shared by the two backends.
namespace grid_atomic {

// Throws, naming the block and the array, unless the block's arrays have one value per
// visibility, the kernel stack's arrays match its planes, and all of them are at `where` (the
// backend's side). Reads no array contents, so it serves device inputs too.
void check_inputs(const VisBlock& vis, const KernelStack& ks, Location where);

}  // namespace grid_atomic
}  // namespace uvflow
