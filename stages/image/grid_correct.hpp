// image.grid_correct: divides the dirty image by the kernel's taper, on the CPU (WPROJ.md).
//
//   in   image    Image, once, host: the dirty image of fft.grid_to_image
//   in   kernels  KernelStack, once, host: the kernels the grid was made with (plane 0 is read
//                 for table_correction kernel; the others need only geometry and oversampling)
//   out  image    Image, once, host: image(x, y) * corr(i_x) * corr(i_y), same sky coordinates
//   params
//     table_correction  choice, kernel, {kernel, sinc, sinc2}: what corr divides by
//
// i = pixel + (grid_size - image_size)/2 is the pixel's grid index; N = grid_size, o = oversample.
// kernel: corr(i) = 1 / kernel_table_response(i) (stages/kernels/spheroidal.hpp), the response of
// the sampled, truncated plane-0 table the gridder used. sinc and sinc2: corr(i) = 1 / (grdsf(|nu|)
// sinc(x)^p), nu = (i - N/2) / (N/2), x = pi (i - N/2) / (N o), p = 1 or 2 (WPROJ.md's and OSKAR's).
#pragma once

#include <memory>

#include "runtime/payloads/image.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/stage.hpp"
#include "stages/kernels/spheroidal.hpp"

namespace uvflow {

StageSpec image_grid_correct_spec();

#ifdef UVFLOW_WITH_CUDA
// stages/image/grid_correct.cu: the same factors, evaluated on the device.
std::unique_ptr<Stage> make_grid_correct_cuda();
#endif

namespace grid_correct {
enum class Table { kernel, sinc, sinc2 };
Table table(const Params& p);
// Throws unless the image is square with the kernels' image size and lives at `where`, and, for
// Table::kernel, the stack holds plane 0.
void check(const Image& img, const KernelStack& ks, Location where, Table t);
// The factor pixels at grid index i are multiplied by, per axis. Table::kernel reads plane 0's
// support and quarter row 0 (`row0`, interleaved re, im); the others read neither.
UVFLOW_HD inline double factor(Table t, int i, int grid_size, int oversample, int support0, const float* row0) {
  if (t != Table::kernel) return grid_correction(i, grid_size, oversample, t == Table::sinc2 ? 2 : 1);
  const double r = kernel_table_response(i, grid_size, oversample, kernel_half_size(oversample, support0), row0);
  return r > 0 ? 1 / r : 1;  // no response at all: left as it is, as grid_correction does
}

// Warns when the grid's corners lie beyond the horizon (l^2 + m^2 >= 1), where kernels.wproj's
// screen is cut and plane 0 is no longer separable: Table::kernel is approximate there.
void warn_if_beyond_horizon(const GridGeometry& g);
}  // namespace grid_correct

}  // namespace uvflow
