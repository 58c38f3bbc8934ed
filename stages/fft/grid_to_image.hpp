// image = Re((-1)^(x+y) FFT_forward((-1)^(x+y) grid / norm)), cropped to the central image_size:
// image pixel x is grid column x + (grid_size - image_size)/2, likewise for y. With DESIGN.md's
// conventions (pos_u = -uu*scale, pos_v = vv*scale) a source at direction cosines (l, m) lands on
// pixel x = N/2 - l/cell, y = N/2 + m/cell (N = image_size): RA increases to the left, as FITS
// viewers and WSClean show it. The grid correction is a separate stage (image.grid_correct).
#pragma once

#include <memory>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::fft_grid_to_image {

inline constexpr In<Grid> grid{.name = "grid", .arity = Arity::once, .doc = "the accumulated uv grid and its norm"};
inline constexpr Out<Image> image{
    .name = "image", .arity = Arity::once, .doc = "the dirty image, before grid correction"};

struct Params {};

inline const StageDecl<Params> decl{
    .type = "fft.grid_to_image",
    .summary = "dirty image from a uv grid: normalise, FFT with centring shifts, real part, central crop",
    .doc = "Divides the grid by its norm, multiplies by (-1)^(x+y), takes the forward 2-D FFT (FFTW, single "
           "precision, multi-threaded on oneTBB), multiplies by (-1)^(x+y) again and keeps the real part of the "
           "central image_size square: image pixel x is grid column x + (grid_size - image_size)/2. With the "
           "gridding conventions of DESIGN.md a source at direction cosines (l, m) appears at pixel (N/2 - l/cell, "
           "N/2 + m/cell), RA increasing to the left as in FITS viewers and WSClean. Rows of the grid that hold no "
           "data and columns outside the crop are not transformed. The image carries the observation's phase "
           "centre, reference frequency, telescope and date, and the cell size, in JY/BEAM; apply "
           "image.grid_correct next. Tested pixel by pixel against a direct double-precision DFT of the grid, and "
           "for the position and sign of a single grid cell's fringe. The cuda backend does the same with cuFFT on "
           "the device-resident grid (a full transform, no pruning, out of place: the grid is left as it was) and "
           "takes the first (-1)^(x+y) and the norm at the crop, as a shift of N/2 and a scale, so no pass over the "
           "grid precedes the transform; it is tested against the cpu backend.",
    .inputs = {grid},
    .outputs = {image},
    .concurrency = Concurrency::serial,
    // The image is the central image_size^2 of the grid.
    .describe = [](const Params&, const PortShapes& in) {
      auto it = in.find(grid.name);
      if (it == in.end() || !it->second.grid) return PortShapes{};
      const int n = it->second.grid->image_size;
      return PortShapes{{std::string(image.name), PortShape{.nx = n, .ny = n, .grid = it->second.grid}}};
    },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/fft/grid_to_image.cu
#endif

// Shared by both backends.
// Throws unless the geometry is usable (even sizes, image no larger than the grid), the arrays
// match it, the grid is at `where` and carries its observation. Reads no array contents.
void check_grid(const Grid& g, Location where);
// Throws unless the grid's norm is positive and finite (something was gridded).
void check_norm(double norm);
// The image's sky coordinates: the observation's phase centre, frequency, bandwidth (first to
// last channel, edge to edge, as WSClean's CDELT3), telescope and date.
SkyWcs sky_of(const Grid& g);

}  // namespace uvflow::fft_grid_to_image
