// example.vis_scale: a stage with a cpu and a cuda backend (vis_scale.cpp, vis_scale.cu). Both
// read this one declaration; with `backend: cuda` in a pipeline the planner moves the blocks to
// the device before the stage and back after it, as for the built-in cuda stages.
#pragma once

#include <memory>

#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace vis_scale {

using namespace uvflow;

// Residency::backend (the default): on the host for the cpu backend, on the device for cuda.
inline constexpr In<VisBlock> in_vis{.name = "vis", .doc = "visibilities"};
inline constexpr Out<VisBlock> out_vis{.name = "vis", .doc = "visibilities times factor"};

struct Params {
  double factor = 1;
};

inline const StageDecl<Params> decl{
    .type = "example.vis_scale",
    .summary = "multiply every visibility by a factor (an example plugin with a cuda backend)",
    .doc = "V' = factor * V, weights and uvw unchanged: a flux-scale correction. The cuda backend does the same "
           "float products on device-resident blocks.",
    .inputs = {in_vis},
    .outputs = {out_vis},
    .params = {{&Params::factor, {.name = "factor", .min = -1e30, .max = 1e30, .doc = "the scale factor"}}},
    .concurrency = Concurrency::parallel,
};

std::unique_ptr<Stage> make_cuda();  // vis_scale.cu

}  // namespace vis_scale
