// What a loop (a `loop:` entry of a pipeline, run by graph/plan_runner) and the stages of its body tell each
// other each cycle: the loop's stop settings and budget go in (LOOP.control), and a designated
// stage's figures come out (the loop's `figures:`), from which the loop decides whether to go on.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/payload.hpp"

namespace uvflow {

inline constexpr char kCycleControl[] = "CycleControl";
// The loop's settings for one cycle. A minor-cycle stage stops this cycle's cleaning at the largest
// of its own threshold, `threshold_jy`, `threshold_sigma` times the noise it measures and
// (1 - major_gain) times the peak it starts from, and after at most `minor_iterations_left` components.
struct CycleControl : PayloadOf<CycleControl, kCycleControl> {
  std::int64_t cycle = 0;       // 0-based
  std::int64_t max_cycles = 1;
  double threshold_jy = 0;      // absolute stop threshold (0: none)
  double threshold_sigma = 0;   // stop threshold in units of the residual's noise (0: none)
  double major_gain = 1;        // the fraction of the peak one cycle's minor iterations take away
  std::int64_t minor_iterations_left = -1;  // components the loop still allows (-1: no limit)
  template <class F> void each_array(F&&) {}
};

inline constexpr char kCycleFigures[] = "CycleFigures";
// What one minor cycle did: the loop's stop conditions and the run report's per-cycle table read it.
struct CycleFigures : PayloadOf<CycleFigures, kCycleFigures> {
  double peak_start = 0;  // peak |residual| (within the mask) when the minor cycle began, Jy/beam
  double peak = 0;        // ... when it stopped
  double noise = 0;       // the residual's robust RMS when it began (1.4826 x the median absolute deviation)
  double flux = 0;        // flux the cycle added to the model, Jy
  double model_flux = 0;  // the model's total flux after it, Jy
  std::int64_t iterations = 0;  // components found in the cycle
  std::string stop;       // why the minor cycle stopped: niter, threshold, major_gain, ...
  template <class F> void each_array(F&&) {}
};

}  // namespace uvflow
