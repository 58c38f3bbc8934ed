// uvw.weight_density: the summed visibility weight in each cell of WSClean's weighting grid, over
// the whole visibility stream: what uniform and Briggs weighting (uvw.weighting) divide by. The
// pipeline reads its visibilities twice: once into this stage, once into uvw.weighting, whose
// blocks wait until the density has arrived (so nothing is buffered).
//
//   in   vis      VisBlock, stream, backend residency: uu, vv in wavelengths, weight (>= 0)
//   in   kernels  KernelStack, once, any residency: only its geometry (image_size, cell) is read
//   out  density  WeightDensity, once, backend residency: W_k per cell, [sum of weights, sum W_k^2],
//                 emitted at end of stream
//   params
//     padding  number, 1.2, [1, 4]: WSClean's -padding; the grid has ceil(image_size * padding)
//              cells a side, rounded up to a multiple of 4 (WSClean's padded image size)
//   backends: cpu  oneTBB over visibilities, std::atomic_ref<double> adds on the cells
//             cuda one thread per visibility, double atomicAdd; only in a build with CUDA
//
// The grid is WSClean's (3.x, structures/imageweights.{h,cpp} and main/settings.cpp): made with
// the padded image size and the pixel scale, so a cell is 1 / (width * cell) wavelengths; only
// v >= 0 is kept, a visibility with v < 0 counting at (-u, -v) (once: its conjugate is not added
// separately); see weight_cell() in runtime/payloads/weights.hpp. Visibilities outside the grid
// add nothing. A non-finite uv or weight or a negative weight stops the run with an error.
#pragma once

#include <memory>

#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/weights.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec uvw_weight_density_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_weight_density_cuda();  // stages/uvw/weight_density.cu
#endif

// Shared by uvw.weight_density and uvw.weighting, both backends.
namespace weighting {

// WSClean's padded image size: ceil(image_size * padding), rounded up to a multiple of 4.
int wsclean_padded_size(int image_size, double padding);
// The weighting grid for the image of `ks` (its image_size and cell).
WeightGridGeometry weight_grid(const KernelStack& ks, double padding);
// A zeroed density in host memory (pinned when it feeds a device stage).
std::shared_ptr<WeightDensity> zero_density(const WeightGridGeometry& g, bool pinned);
// Throws, naming the block, unless uu, vv and weight have one value per visibility and lie at
// `where`. Reads no array contents.
void check_block(const VisBlock& vis, Location where);
// Throws unless the density's arrays match its geometry and lie at `where`.
void check_density(const WeightDensity& d, Location where);
// Throws unless the block and the density come from the same visibility set (the origin and the
// visibility count of their observations), e.g. when a pipeline's two readers were given
// different files.
void check_same_data(const VisBlock& vis, const WeightDensity& d);

}  // namespace weighting
}  // namespace uvflow
