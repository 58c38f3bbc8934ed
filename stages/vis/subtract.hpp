// Residual visibilities: data - model, block by block. The two streams are joined by item index
// (graph/stage_node.cpp), so block i of `model` must be the prediction of block i of `data`:
// the same visibilities in the same order, which the stage checks by their uvw.
#pragma once

#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::vis_subtract {

inline constexpr In<VisBlock> data{.name = "data", .doc = "the observed visibilities"};
inline constexpr In<VisBlock> model{
    .name = "model",
    .doc = "the predicted visibilities of the same block, in the same order (degrid.*)"};
inline constexpr Out<VisBlock> residual{.name = "vis", .doc = "`data` with vis replaced by data - model"};

struct Params {};

inline const StageDecl<Params> decl{
    .type = "vis.subtract",
    .summary = "residual visibilities: data - model, block by block",
    .doc = "Joins block i of `data` with block i of `model` and emits `data` with its visibilities replaced by "
           "data - model; every other array (uvw, weights, antennas, times, channels, coords) is data's, so "
           "io.write_ms can write the residual into a Measurement Set column. The two blocks must hold the same "
           "visibilities in the same order: an input error names the block and the first visibility whose size, "
           "uu, vv or ww (or antenna pair, time or channel, where both carry them) differ, e.g. a model predicted "
           "from a differently sorted or flagged stream. The cuda backend subtracts on the device (the residual of "
           "a loop's major cycles stays there: pipelines/clean_image_gpu.yaml); it compares uu, vv and ww there "
           "too, unless the model's are the data's own arrays, as degrid.wproj's output shares them (one wait per "
           "block otherwise). Tested against the difference computed directly and in a pipeline (io.read_ms data, "
           "degrid.wproj model).",
    .inputs = {data, model},
    .outputs = {residual},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();
std::unique_ptr<Stage> make_cuda();  // stages/vis/subtract.cu

// The checks both backends make on the host: the blocks' sizes, and the antennas, times and
// channels (host arrays on either backend) where both carry them; InputError names the first difference.
void check_same_host_arrays(const VisBlock& d, const VisBlock& m);

}  // namespace uvflow::vis_subtract
