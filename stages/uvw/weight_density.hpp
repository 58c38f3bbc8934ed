// The pipeline reads its visibilities twice: once into this stage, once into uvw.weighting, whose
// blocks wait until the density has arrived (so nothing is buffered). The weighting grid itself
// and the checks both stages make are in stages/shared/weighting.hpp.
#pragma once

#include <memory>

#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/payloads/weights.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::uvw_weight_density {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "visibilities: uu, vv in wavelengths, weights >= 0"};
inline constexpr In<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .residency = Residency::any,
    .doc = "the kernel stack of the imaging chain: its image_size and cell set the weighting grid (no kernel is read)"};
inline constexpr Out<WeightDensity> density{
    .name = "density", .arity = Arity::once,
    .doc = "W_k per cell of the weighting grid and [sum of weights, sum of W_k^2], at the end of the stream"};

struct Params {
  double padding = 1.2;
};

inline const StageDecl<Params> decl{
    .type = "uvw.weight_density",
    .summary = "the summed visibility weight per cell of WSClean's weighting grid, for uniform and Briggs weighting",
    .doc = "Accumulates, over the whole visibility stream, W_k = the sum of the weights of the visibilities in cell k "
           "of the grid WSClean weights on, and emits it at the end of the stream with the sum of those weights and "
           "the sum over cells of W_k^2: everything uvw.weighting needs for uniform and Briggs weighting. The grid is "
           "WSClean's (3.x: structures/imageweights.{h,cpp}, main/settings.cpp): its side is the padded image size, "
           "ceil(image_size * padding) rounded up to a multiple of 4, its cell 1 / (side * cell) wavelengths "
           "(image_size and cell come with the kernel stack); it keeps v >= 0 only, a visibility with v < 0 counting "
           "once at (-u, -v); cell (x, y) = (floor(u side cell + side/2), floor(v side cell)). Visibilities outside it "
           "add nothing. Because every weight must be known before any can be applied, a pipeline reads its "
           "visibilities twice: once into this stage, once into uvw.weighting, whose blocks wait (bounded by "
           "run.max_in_flight) until the density has arrived; no visibility is buffered. "
           "cpu: oneTBB over visibilities, atomic double adds. cuda: one thread per visibility, atomic double adds, "
           "totals reduced on the device; one host synchronisation at the end of the stream, to report invalid input. "
           "Tested against an independent double-precision implementation of WSClean's definitions, cuda against cpu, "
           "and end to end against WSClean's images (tests/wsclean_test). A non-finite uv or weight or a negative "
           "weight stops the run (cpu: naming the visibility; cuda: with their count).",
    .inputs = {vis, kernels},
    .outputs = {density},
    .params = {{&Params::padding,
                {.name = "padding", .min = 1.0, .max = 4.0,
                 .doc = "WSClean's -padding: the weighting grid has ceil(image_size * padding) cells a side, rounded up "
                        "to a multiple of 4 (keep WSClean's 1.2 to weight as it does)"}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/uvw/weight_density.cu
#endif

}  // namespace uvflow::uvw_weight_density
