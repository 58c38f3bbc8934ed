// image.grid_correct: divides the dirty image by the kernel's taper, on the CPU (WPROJ.md).
//
//   in   image    Image, once, host: the dirty image of fft.grid_to_image
//   in   kernels  KernelStack, once, host: the geometry and oversampling the grid was made with
//   out  image    Image, once, host: image(x, y) * corr(i_x) * corr(i_y), same sky coordinates
//   no parameters
//
// corr(i) = 1 / (grdsf(|nu|) sinc(x)^2), nu = (i - N/2) / (N/2), x = pi (i - N/2) / (N o), with
// N = grid_size, o = oversample and i = pixel + (grid_size - image_size)/2 the pixel's grid index
// (stages/kernels/spheroidal.hpp).
#pragma once

#include <memory>

#include "runtime/payloads/image.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec image_grid_correct_spec();

#ifdef UVFLOW_WITH_CUDA
// stages/image/grid_correct.cu; sinc_power as stages/kernels/spheroidal.hpp's grid_correction.
std::unique_ptr<Stage> make_grid_correct_cuda();
#endif

namespace grid_correct {
// Throws unless the image is square with the kernels' image size and lives at `where`.
void check(const Image& img, const KernelStack& ks, Location where);
// The `table_correction` parameter as a power of the sinc.
int sinc_power(const Params& p);
}  // namespace grid_correct

}  // namespace uvflow
