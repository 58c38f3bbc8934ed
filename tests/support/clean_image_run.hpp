// Settings and runs shared by the tests that run pipelines/clean_image*.yaml and compare runs.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"

namespace uvflow::test {

// Every output of a run tagged `tag` written into `dir` as TAG_restored.fits, TAG_model.fits,
// TAG_residual.fits, TAG_psf.fits and TAG_restored.png, no run report, then `more`.
inline std::vector<std::string> clean_image_outputs(const std::filesystem::path& dir, const std::string& tag,
                                                    const std::vector<std::string>& more = {}) {
  auto at = [&](const char* name) { return (dir / (tag + "_" + name)).string(); };
  std::vector<std::string> s{"fits.path=" + at("restored.fits"), "model_fits.path=" + at("model.fits"),
                             "residual_fits.path=" + at("residual.fits"), "psf_fits.path=" + at("psf.fits"),
                             "png.path=" + at("restored.png"), "run.report="};
  s.insert(s.end(), more.begin(), more.end());
  return s;
}

// `pipeline` for `cycles` major cycles twice: tagged "mem" with its data held in memory, and tagged
// "disk" with the budget `budget` ("run.hold_memory_mb=1" or "run.hold_device_mb=1") and its
// scratch file in `dir`; checks that only the second spilled, and only `held` (its data), and that
// both ran as many cycles.
struct HeldRuns {
  RunReport mem, disk;
};
inline HeldRuns run_in_memory_and_held(const std::filesystem::path& pipeline, const std::filesystem::path& dir,
                                       Registry& reg, int cycles, const std::string& budget,
                                       const std::string& held) {
  const std::string c = "vars.max_cycles=" + std::to_string(cycles);
  HeldRuns r{run_plan(load_plan(pipeline, clean_image_outputs(dir, "mem", {c}), reg)),
             run_plan(load_plan(pipeline, clean_image_outputs(dir, "disk", {c, budget, "run.scratch_dir=" + dir.string()}), reg))};
  EXPECT_TRUE(r.mem.held.empty());
  EXPECT_EQ(r.disk.held.size(), 1u);
  if (r.disk.held.size() == 1) {
    const HeldReport& h = r.disk.held[0];
    EXPECT_EQ(h.output, held);
    EXPECT_GT(h.spilled_items, 0);
    std::printf("%s, %d cycles: %lld of %lld items of %s (%.1f MB) in the scratch file; %.3f s against %.3f s in memory\n",
                pipeline.filename().c_str(), cycles, static_cast<long long>(h.spilled_items),
                static_cast<long long>(h.items), h.output.c_str(), h.spilled_bytes / 1e6, r.disk.wall_s, r.mem.wall_s);
  }
  EXPECT_EQ(r.disk.loops.at(0).cycles.size(), r.mem.loops.at(0).cycles.size());
  return r;
}

}  // namespace uvflow::test
