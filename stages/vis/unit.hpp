// Unit visibilities, for the dirty beam (PSF): every visibility replaced by 1, weights and
// coordinates kept, so the gridding chain that makes the dirty image makes the PSF from the same
// weights: the image of a 1 Jy point source at the phase centre.
#pragma once

#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::vis_unit {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "visibilities"};
inline constexpr Out<VisBlock> unit{.name = "vis", .doc = "`vis` with every visibility 1"};

struct Params {};

inline const StageDecl<Params> decl{
    .type = "vis.unit",
    .summary = "unit visibilities (vis = 1, weights kept): the input of the PSF's gridding chain",
    .doc = "Emits each block with its visibilities replaced by 1 + 0i; uvw, weights and every other array are "
           "the input's. Gridded, transformed and grid-corrected like the data, they give the dirty beam (PSF) "
           "of the same weights and gridder: the image of a 1 Jy source at the phase centre, peak 1 at pixel "
           "(N/2, N/2). Give the PSF chain's kernels.wproj twice the image size so that deconv.hogbom can "
           "subtract the PSF from any pixel of the image (pipelines/clean_image.yaml). cuda: the same on "
           "device-resident blocks (those the data's chain uploads, so a GPU PSF chain needs no second "
           "upload), a fill kernel on the stage's stream. Tested for the arrays it keeps (cuda against cpu) "
           "and, in that pipeline, for a PSF of peak 1 at its centre, its largest pixel.",
    .inputs = {vis},
    .outputs = {unit},
    .concurrency = Concurrency::parallel,
};

StageSpec spec();
std::unique_ptr<Stage> make_cuda();  // stages/vis/unit.cu

}  // namespace uvflow::vis_unit
