// fft.grid_to_image: the dirty image from a uv grid, on the CPU (WPROJ.md "From grid to image").
//
//   in   grid   Grid, once, host: cells [v][u], norm in totals[0], geometry and observation
//   out  image  Image, once, host: image_size^2 pixels [y][x], x fastest, row 0 at the bottom,
//               with the sky coordinates of the grid's observation (bunit JY/BEAM)
//   no parameters: the geometry comes with the grid (kernels.wproj's image_size and cell_arcsec)
//
// image = Re((-1)^(x+y) FFT_forward((-1)^(x+y) grid / norm)), cropped to the central image_size:
// image pixel x is grid column x + (grid_size - image_size)/2, likewise for y. With DESIGN.md's
// conventions (pos_u = -uu*scale, pos_v = vv*scale) a source at direction cosines (l, m) lands on
// pixel x = N/2 - l/cell, y = N/2 + m/cell (N = image_size): RA increases to the left, as FITS
// viewers and WSClean show it. The grid correction is a separate stage (image.grid_correct).
#pragma once

#include <memory>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec fft_grid_to_image_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_grid_to_image_cuda();  // stages/fft/grid_to_image.cu
#endif

// Shared by both backends.
namespace grid_to_image {
// Throws unless the geometry is usable (even sizes, image no larger than the grid), the arrays
// match it, the grid is at `where` and carries its observation. Reads no array contents.
void check(const Grid& grid, Location where);
// Throws unless the grid's norm is positive and finite (something was gridded).
void check_norm(double norm);
// The image's sky coordinates: the observation's phase centre, frequency, bandwidth (first to
// last channel, edge to edge, as WSClean's CDELT3), telescope and date.
SkyWcs sky_of(const Grid& grid);
}  // namespace grid_to_image

}  // namespace uvflow
