#pragma once

#include <memory>
#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/shared/wstack.hpp"

namespace uvflow::degrid_wstack {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "visibilities to predict, in any order (raw blocks)"};
inline constexpr In<Image> model{
    .name = "model", .arity = Arity::once, .doc = "the model image, Jy per pixel, square, with its SIN WCS (cell size)"};
inline constexpr Out<VisBlock> out_vis{
    .name = "vis", .doc = "the same block, in the same order, with `vis` replaced by the predicted visibilities"};

struct Params {
  double epsilon = 1e-4;
  double padding = 2.0;
};

inline const StageDecl<Params> decl{
    .type = "degrid.wstack",
    .summary = "w-stacking prediction with ES kernels: model image to visibilities at a requested accuracy",
    .doc = "The exact adjoint of grid.wstack (docs/wstack.md): V = sum over pixels of I(x, y) exp(+2 pi i (u l + v m + "
           "w (n - 1))), computed per block by dividing the image by the kernel's Fourier transform along u, v and "
           "w, then per w-plane multiplying by the conjugate w-screen, transforming (inverse FFT, single precision) "
           "and gathering each visibility's W x W cells with the ES kernel (accumulated in double). The planes "
           "span the block's own |w| range, so each block costs its planes' FFTs: feed large blocks. No "
           "normalisation by weights. The block keeps its order and every other array. Tested against a direct "
           "double-precision DFT (relative L2 error below epsilon) and by <degrid(I), V> = <I, grid(V)>. The cuda "
           "backend does the same on the device (one wait per block for its |w| and |v| range, one thread per "
           "visibility, per plane a pruned inverse FFT over the image's columns and the rows the block reads) and "
           "is tested against the cpu backend.",
    .inputs = {vis, model},
    .outputs = {out_vis},
    .params = {{&Params::epsilon,
                {.name = "epsilon", .min = 1e-6, .max = 0.1, .doc = "requested relative L2 accuracy of the visibilities"}},
               {&Params::padding,
                {.name = "padding",
                 .min = 1.2,
                 .max = 4.0,
                 .doc = "oversampling sigma: grid cells per image pixel (as grid.wstack's: 1.2 reaches epsilon 1e-3, "
                        "1.5 1e-5, 2 1e-6)"}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/degrid/wstack.cu
#endif

// Both backends: ParamError naming epsilon unless the kernel can reach it; the engine for a model
// image (InputError unless it is square, of even side, with its cell size, inside the horizon).
void check_epsilon(const Params& p);
wstack::Engine make_engine(const Image& model, const Params& p);

}  // namespace uvflow::degrid_wstack
