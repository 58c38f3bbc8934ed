#pragma once

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::fft_image_to_grid {

inline constexpr In<Image> image{
    .name = "image",
    .arity = Arity::once,
    .doc = "the model image (Jy per pixel), already multiplied by image.grid_correct's factor"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .doc = "the kernels the grid will be degridded with: its geometry"};
inline constexpr Out<Grid> grid{.name = "grid", .arity = Arity::once, .doc = "the model grid, norm 0"};

struct Params {};

inline const StageDecl<Params> decl{
    .type = "fft.image_to_grid",
    .summary = "model image -> uv grid: zero padding and the inverse FFT, the adjoint of fft.grid_to_image",
    .doc = "Places the model image in the middle of a zero grid of the kernels' grid size, multiplies by "
           "(-1)^(x+y), runs the backward (unnormalised) 2-D FFT and multiplies by (-1)^(u+v) again: the exact "
           "adjoint of fft.grid_to_image's transform (without its division by the norm), so degridding the result "
           "predicts V = sum over pixels of I exp(+2 pi i (u l + v m + w (n - 1))) for a model of I Jy per pixel. "
           "Applying image.grid_correct to the model first (the same factor as imaging, which is its own adjoint) "
           "makes the chain model -> grid_correct -> image_to_grid -> degrid the adjoint of the imaging chain. "
           "The image must be square with the kernels' image size, and, where it carries sky coordinates, their "
           "cell size. Only the image's columns are transformed along v (the rest are zero). Tested against the "
           "adjoint identity with fft.grid_to_image and, through degridding, against a direct DFT.",
    .inputs = {image, kernels},
    .outputs = {grid},
};

StageSpec spec();
// Throws InputError unless the model image fits the kernels (size, and cell where it has a WCS).
void check_model(const Image& img, const KernelStack& ks);
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/fft/image_to_grid.cu
#endif

}  // namespace uvflow::fft_image_to_grid
