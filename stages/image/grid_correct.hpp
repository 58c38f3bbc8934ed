// i = pixel + (grid_size - image_size)/2 is the pixel's grid index; N = grid_size, o = oversample.
// kernel: corr(i) = 1 / kernel_table_response(i) (stages/shared/spheroidal.hpp), the response of
// the sampled, truncated plane-0 table the gridder used. sinc and sinc2: corr(i) = 1 / (grdsf(|nu|)
// sinc(x)^p), nu = (i - N/2) / (N/2), x = pi (i - N/2) / (N o), p = 1 or 2 (WPROJ.md's and OSKAR's).
#pragma once

#include <memory>
#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/shared/spheroidal.hpp"

namespace uvflow::image_grid_correct {

inline constexpr In<Image> in_image{.name = "image", .arity = Arity::once, .doc = "the dirty image (fft.grid_to_image)"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .doc = "the kernel stack the grid was made with"};
inline constexpr Out<Image> out_image{
    .name = "image", .arity = Arity::once, .doc = "the corrected image, same sky coordinates"};

struct Params {
  std::string table_correction = "kernel";
};

inline const StageDecl<Params> decl{
    .type = "image.grid_correct",
    .summary = "grid correction: divide the dirty image by the response of the kernel table the grid was made with",
    .doc = "Multiplies pixel (x, y) by corr(i_x) corr(i_y), i = pixel + (grid_size - image_size)/2 the pixel's grid "
           "index, N the grid size and o the kernels' oversampling. table_correction kernel (default): corr(i) = 1 / "
           "r(i), r the response of the plane-0 kernel table itself along one axis, relative to the centre: its "
           "samples summed as the gridder picks them (sample m = k o - j, each sub-cell offset j equally likely), "
           "times the sinc of the nearest-sample lookup, which moves each visibility by up to half a sample. It is "
           "exact for the table, which holds the spheroidal taper only as conv_size/o samples across the grid: "
           "against WSClean's wgridder a point source 110 pixels out on a 320-cell grid at o = 16 is 0.008 % off "
           "with it, 0.245 % with sinc (bench/results/wsclean_accuracy.md). sinc: corr(i) = 1 / (grdsf(|nu|) "
           "sinc(pi (i - N/2) / (N o))), nu = (i - N/2) / (N/2), from Schwab's formula; sinc2: with sinc^2, "
           "WPROJ.md's and OSKAR's choice, which over-corrects towards the image edge (worst point-source error "
           "against a direct DFT 1.24 % instead of 0.27 % at o = 4, bench/image_accuracy). 1 where the product "
           "vanishes. Tested against independent long-double evaluations (the table response summed over every "
           "sub-cell offset of the 2-D plane 0; Schwab's published coefficients), and end to end against a DFT and "
           "WSClean. The cuda backend evaluates the same functions on the device and is tested against the cpu "
           "backend.",
    .inputs = {in_image, kernels},
    .outputs = {out_image},
    .params = {{&Params::table_correction,
                {.name = "table_correction",
                 .choices = {"kernel", "sinc", "sinc2"},
                 .doc = "kernel: the response of the kernel table itself (exact); sinc: Schwab's grdsf and the "
                        "nearest-sample sinc; sinc2: OSKAR's (for comparing with OSKAR images)"}}},
    .concurrency = Concurrency::serial,
    // The image keeps its size: the dirty image's, else the kernels' image size.
    .describe = [](const Params&, const PortShapes& in) {
      PortShape s;
      if (auto it = in.find(in_image.name); it != in.end()) s = it->second;
      if (auto it = in.find(kernels.name); !s.sized() && it != in.end() && it->second.grid)
        s = PortShape{.nx = it->second.grid->image_size, .ny = it->second.grid->image_size, .grid = it->second.grid};
      return PortShapes{{std::string(out_image.name), s}};
    },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
// stages/image/grid_correct.cu: the same factors, evaluated on the device.
std::unique_ptr<Stage> make_cuda();
#endif

// Shared by both backends.
enum class Table { kernel, sinc, sinc2 };
Table table(const std::string& table_correction);
// Throws unless the image is square with the kernels' image size and lives at `where`, and, for
// Table::kernel, the stack holds plane 0.
void check_inputs(const Image& img, const KernelStack& ks, Location where, Table t);
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

}  // namespace uvflow::image_grid_correct
