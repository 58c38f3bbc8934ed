// Frame i is a function of (seed, i) only, and the noise comes from a counter-based hash (an
// Irwin-Hall sum of four uniforms), so frames are made in parallel at memory speed and reproduced
// exactly whatever the order or the number of threads.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_simulate_frames {

inline constexpr Out<Image> frames{.name = "frames", .residency = Residency::host, .doc = "one frame per item"};

struct Params {
  std::int64_t width = 813;
  std::int64_t height = 5271;
  std::int64_t count = 8;
  std::int64_t seed = 1;
  double background = 100.0;
  std::int64_t sources = 300;
  double noise = 2.0;
  std::int64_t distinct = 0;
  std::string share = "none";
};

inline const StageDecl<Params> decl{
    .type = "io.simulate_frames",
    .summary = "synthetic PROBA-V-like frames: smooth background, point sources and noise",
    .doc = "Frames of width x height float pixels (default 813 x 5271, the size the StrayLight report works on): "
           "a smooth separable background of slow sinusoids, point sources (Gaussian spots of 1 pixel sigma, "
           "fluxes log-uniform from 1 to 100 times the background) and pixel noise (an Irwin-Hall sum of four "
           "uniforms, close to Gaussian). Frame i depends only on (seed, i): the stream is reproduced exactly "
           "whatever the order or the number of threads. Made in parallel at about the speed of writing the "
           "frame, so it does not distort benchmarks of the stages it feeds on a few cores; with distinct: N the "
           "first N frames are made before the run (in pinned memory when they feed an upload) and repeated, so "
           "that a GPU benchmark streams at the bus's speed, not the frame maker's.",
    .outputs = {frames},
    .params = {{&Params::width, {.name = "width", .unit = "pixels", .min = 1, .max = 65536, .doc = "frame width (x)"}},
               {&Params::height, {.name = "height", .unit = "pixels", .min = 1, .max = 65536, .doc = "frame height (y)"}},
               {&Params::count, {.name = "count", .min = 0, .max = 1e9, .doc = "frames in the stream"}},
               {&Params::seed, {.name = "seed", .min = 0, .doc = "frame i is a function of (seed, i) only"}},
               {&Params::background, {.name = "background", .min = 0, .max = 1e30, .doc = "mean background level"}},
               {&Params::sources, {.name = "sources", .min = 0, .max = 1e7, .doc = "point sources per frame"}},
               {&Params::noise,
                {.name = "noise", .min = 0, .max = 1e30, .doc = "standard deviation of the pixel noise"}},
               {&Params::distinct,
                {.name = "distinct",
                 .min = 0,
                 .max = 1e6,
                 .doc = "0: every frame made as it streams; N > 0: frames 0 to N-1 are made before the run and "
                        "frame i is frame i mod N (benchmarks: the frames are in host memory, as if read, and cost "
                        "nothing per frame)"}},
               {&Params::share,
                {.name = "share",
                 .choices = {"none", "frames"},
                 .doc = "under mpirun -np N (docs/distributed.md): none, every rank makes every frame; frames, frame i is made (and so written) by rank i mod N alone, round-robin. One process makes every frame either way"}}},
    .concurrency = Concurrency::parallel,
    .describe = [](const Params& p, const PortShapes&) {
      return PortShapes{{std::string(frames.name), PortShape{.items = p.count, .nx = int(p.width), .ny = int(p.height)}}};
    },
};

StageSpec spec();

}  // namespace uvflow::io_simulate_frames
