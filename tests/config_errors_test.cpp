// Pinned diagnostics: each invalid pipeline in tests/configs gives exactly these messages, every
// problem at once, with file:line:col, and nothing runs.
#include <gtest/gtest.h>

#include "graph/pipeline.hpp"
#include "stages/builtin.hpp"
#include "tests/support/source_dir.hpp"

using namespace uvflow;

namespace {

std::vector<std::string> diagnostics(const std::string& name, std::vector<std::string> sets = {}) {
  Registry reg;
  register_builtin_stages(reg);
  const std::string file = (test::source_dir() / "tests/configs" / name).string();
  try {
    load_plan(file, sets, reg);
  } catch (const ConfigError& e) {
    std::vector<std::string> out;
    for (auto& d : e.diagnostics()) {
      std::string s = d.str();
      if (s.rfind(file, 0) == 0) s = name + s.substr(file.size());  // path relative to tests/configs
      out.push_back(s);
    }
    return out;
  }
  return {"(no error)"};
}

using V = std::vector<std::string>;

}  // namespace

TEST(ConfigErrors, UnknownStageType) {
  EXPECT_EQ(diagnostics("unknown_type.yaml"),
            V{"unknown_type.yaml:5:22: error: unknown stage type 'grid.tiledd' (did you mean 'grid.tiled'?); "
              "'uvflow stages' lists them"});
}

TEST(ConfigErrors, UnknownParameterWithSuggestion) {
  EXPECT_EQ(diagnostics("unknown_param.yaml"),
            V{"unknown_param.yaml:6:31: error: stage 'kernels' (kernels.wproj): unknown parameter 'overample' (did "
              "you mean 'oversample'?); 'uvflow describe kernels.wproj' lists them"});
}

TEST(ConfigErrors, WrongType) {
  EXPECT_EQ(diagnostics("wrong_type.yaml"),
            V{"wrong_type.yaml:6:43: error: stage 'kernels' (kernels.wproj) parameter 'oversample' must be an "
              "integer, got 'four'"});
}

TEST(ConfigErrors, OutOfRange) {
  EXPECT_EQ(diagnostics("out_of_range.yaml"),
            V{"out_of_range.yaml:6:43: error: stage 'kernels' (kernels.wproj) parameter 'oversample' = 1 is out of "
              "range [2, 16]"});
}

TEST(ConfigErrors, MissingInput) {
  EXPECT_EQ(diagnostics("missing_input.yaml"),
            V{"missing_input.yaml:4:5: error: stage 'grid' (grid.serial): input 'kernels' (KernelStack, once) is not "
              "connected; add 'in: {kernels: STAGE}'"});
}

TEST(ConfigErrors, Cycle) {
  EXPECT_EQ(diagnostics("cycle.yaml"), V{"cycle.yaml:6:5: error: stages form a cycle: b -> a -> b"});
}

TEST(ConfigErrors, HostOutputFeedingDeviceInputUnderExplicitTransfers) {
  EXPECT_EQ(diagnostics("explicit_transfer.yaml"),
            V{"explicit_transfer.yaml:7:60: error: stage 'grid' (grid.atomic, cuda): input 'vis' needs device data "
              "but 'vis.vis' (io.simulate, cpu) produces host data; with run.transfers: explicit, add a "
              "'transfer.to_device' stage between them"});
}

TEST(ConfigErrors, EveryProblemIsReportedOnceAndTogether) {
  EXPECT_EQ(diagnostics("many_errors.yaml"),
            (V{"many_errors.yaml:2:22: error: run.max_in_flight = 0 is out of range [1, 4096]",
               "many_errors.yaml:4:51: error: stage 'vis' (io.simulate) parameter 'preset' must be one of tiny, small, "
               "synthetic, el30-56, el56-82, el82-70, got 'medium'",
               "many_errors.yaml:7:26: error: stage 'kernels' (kernels.wproj) parameter 'image_size' must be an "
               "integer, got '256.5'",
               "many_errors.yaml:7:42: error: stage 'kernels' (kernels.wproj) parameter 'padding' = 9 is out of range "
               "[1, 4]",
               "many_errors.yaml:9:48: error: stage 'grid' (grid.tiled): input 'buckets': stage 'vis' has outputs "
               "info, vis; write 'vis.PORT'"}));
}

TEST(ConfigErrors, OverridesAreCheckedLikeTheFile) {
  EXPECT_EQ(diagnostics("missing_input.yaml", {"vis.presett=small", "grd.backend=cuda", "vis.preset=huge"}),
            (V{"--set vis.presett=small: error: stage 'vis' (io.simulate): unknown parameter 'presett' (did you "
               "mean 'preset'?)",
               "--set vis.preset=huge: error: stage 'vis' (io.simulate) parameter 'preset' must be one of tiny, "
               "small, synthetic, el30-56, el56-82, el82-70, got 'huge'",
               "--set grd.backend=cuda: error: no stage 'grd' to set (did you mean 'grid'?)",
               "missing_input.yaml:4:5: error: stage 'grid' (grid.serial): input 'kernels' (KernelStack, once) is "
               "not connected; add 'in: {kernels: STAGE}'"}));
}

TEST(ConfigErrors, ValidPipelinesHaveNone) {
  Registry reg;
  register_builtin_stages(reg);
  for (auto& e : std::filesystem::directory_iterator(test::source_dir() / "pipelines"))
    if (e.path().extension() == ".yaml") {
      EXPECT_NO_THROW(load_plan(e.path(), {}, reg)) << e.path();
    }
}
