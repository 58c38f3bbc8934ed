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
// "disk" with the hold budgets `budgets` ("run.hold_memory_mb=1", "run.hold_device_mb=1") and the
// scratch file in `dir`; checks that only the second went past its budgets, and only with `held`
// (the loop's data), and that both ran as many cycles.
struct HeldRuns {
  RunReport mem, disk;
  HeldReport held;  // the second run's
};
inline HeldRuns run_in_memory_and_held(const std::filesystem::path& pipeline, const std::filesystem::path& dir,
                                       Registry& reg, int cycles, const std::vector<std::string>& budgets,
                                       const std::string& held) {
  std::vector<std::string> disk{"vars.max_cycles=" + std::to_string(cycles), "run.scratch_dir=" + dir.string()};
  disk.insert(disk.end(), budgets.begin(), budgets.end());
  HeldRuns r{run_plan(load_plan(pipeline, clean_image_outputs(dir, "mem", {disk[0]}), reg)),
             run_plan(load_plan(pipeline, clean_image_outputs(dir, "disk", disk), reg)),
             {}};
  EXPECT_TRUE(r.mem.held.empty());
  EXPECT_EQ(r.disk.held.size(), 1u);
  if (!r.disk.held.empty()) r.held = r.disk.held[0];
  EXPECT_EQ(r.held.output, held);
  std::printf("%s, %d cycles: of %lld items of %s, %lld device items in host memory, %lld (%.1f MB) in the scratch "
              "file; %.3f s against %.3f s in memory\n",
              pipeline.filename().c_str(), cycles, static_cast<long long>(r.held.items), r.held.output.c_str(),
              static_cast<long long>(r.held.items_on_host), static_cast<long long>(r.held.spilled_items),
              r.held.spilled_bytes / 1e6, r.disk.wall_s, r.mem.wall_s);
  EXPECT_EQ(r.disk.loops.at(0).cycles.size(), r.mem.loops.at(0).cycles.size());
  return r;
}

}  // namespace uvflow::test
