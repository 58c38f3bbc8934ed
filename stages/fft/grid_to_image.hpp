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

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec fft_grid_to_image_spec();

}  // namespace uvflow
