// A real w-projection kernel stack from kernels.wproj, for tests of the stages that read one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/harness.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/units.hpp"
#include "stages/kernels/wproj.hpp"

namespace uvflow::test {

// The VisSetInfo kernels.wproj reads: an observation with these |w| statistics (wavelengths).
inline std::shared_ptr<VisSetInfo> w_stats_info(double max_w, double min_w, double rms_w) {
  auto obs = std::make_shared<Observation>();
  obs->max_abs_w = max_w;
  obs->min_abs_w = min_w;
  obs->rms_abs_w = rms_w;
  auto info = std::make_shared<VisSetInfo>();
  info->obs = obs;
  return info;
}

// The stack for an image_size^2 image of cell_arcsec cells, cached in cache_dir ("": uncached);
// max_w 0 gives w-planes for |w| up to 0.25 / cell. Its w_planes are OSKAR's count (WPROJ.md),
// max(16, 1.05 max_w |sin(cell image_size / 2)|), given, so that its FFT is OSKAR's too
// (padding x image_size, capped at 2000): the stack the seeds' codes make, whatever kernels.wproj
// would choose for the field by itself.
inline std::shared_ptr<const KernelStack> wproj_stack(int image_size, double cell_arcsec, int oversample,
                                                      double padding = 1.2, double max_w = 0,
                                                      const std::string& cache_dir = "") {
  const double cell = cell_arcsec * kArcsecToRad;
  const double w = max_w > 0 ? 1.05 * max_w : 0.25 / cell;
  const auto planes = std::max<std::int64_t>(16, std::int64_t(w * std::fabs(std::sin(cell * image_size / 2))));
  StageHarness h(kernels_wproj::spec(), "cpu",
                 {{"image_size", std::int64_t(image_size)},
                  {"cell_arcsec", cell_arcsec},
                  {"oversample", std::int64_t(oversample)},
                  {"w_planes", planes},
                  {"padding", padding},
                  {"cache_dir", cache_dir}});
  h.set_input("info", w_stats_info(max_w, 0, max_w / 2));
  h.process();
  return h.output<KernelStack>("kernels");
}

}  // namespace uvflow::test
