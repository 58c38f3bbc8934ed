// io.simulate_frames: synthetic PROBA-V-like frames for tests and benchmarks.
//
//   out  frames  Image, stream, host: `count` frames of width x height float pixels
//   params
//     width, height  frame size, pixels (default 813 x 5271, the StrayLight report's frames)
//     count          frames in the stream (default 8)
//     seed           frame i is a function of (seed, i) only: any order, any thread count
//     background     mean level of the smooth background (default 100)
//     sources        point sources per frame (default 300)
//     noise          standard deviation of the pixel noise (default 2)
//     distinct       0 (default): every frame made as it streams; N: frames 0..N-1 made before the
//                    run, frame i is frame i mod N with index i (pixels shared, nothing made per frame)
//
// Content: a smooth separable background (low-order sinusoids across and along the track), point
// sources (Gaussian spots of 1 pixel sigma, fluxes log-uniform over two decades above the
// background) and pixel noise (an Irwin-Hall sum of four uniforms from a counter-based hash, so
// frames are made in parallel at memory speed and reproduced exactly).
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec simulate_frames_spec();

}  // namespace uvflow
