// Pinned diagnostics: each invalid pipeline in tests/configs gives exactly these messages, every
// problem at once, with file:line:col, and nothing runs.
#include <gtest/gtest.h>

#include "graph/pipeline.hpp"
#include "stages/builtin.hpp"
#include "tests/support/source_dir.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;

namespace {

// The diagnostics of loading `file`, with its folder left out of every path they name.
std::vector<std::string> diagnostics_of(const std::filesystem::path& file, std::vector<std::string> sets = {}) {
  Registry reg;
  register_builtin_stages(reg);
  try {
    load_plan(file, sets, reg);
  } catch (const ConfigError& e) {
    const std::string dir = file.parent_path().string() + "/";
    std::vector<std::string> out;
    for (auto& d : e.diagnostics()) {
      std::string s = d.str();
      for (auto at = s.find(dir); at != std::string::npos; at = s.find(dir)) s.erase(at, dir.size());
      out.push_back(s);
    }
    return out;
  }
  return {"(no error)"};
}

std::vector<std::string> diagnostics(const std::string& name, std::vector<std::string> sets = {}) {
  return diagnostics_of(test::source_dir() / "tests/configs" / name, std::move(sets));
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
            V{"out_of_range.yaml:6:43: error: stage 'kernels' (kernels.wproj) parameter 'oversample' = 17 is out of "
              "range [0, 16]"});
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

// yaml-cpp keeps a repeated key's later value silently; both repeats are errors, and nothing else
// is reported (the misleading "unknown variable" the second `vars` would cause).
TEST(ConfigErrors, DuplicateKeysAreErrorsAtTheSecond) {
  EXPECT_EQ(diagnostics("duplicate_key.yaml"),
            (V{"duplicate_key.yaml:7:52: error: duplicate key 'oversample' (first at line 7, column 37); a key may "
               "appear once in a mapping",
               "duplicate_key.yaml:9:1: error: duplicate key 'vars' (first at line 2, column 1); a key may appear once "
               "in a mapping"}));
}

TEST(ConfigErrors, ATabInTheIndentationIsNamed) {
  EXPECT_EQ(diagnostics("tab_indent.yaml"),
            V{"tab_indent.yaml:4:2: error: YAML syntax: illegal block entry (a tab character at line 4, column 1: YAML "
              "indents with spaces only)"});
}

TEST(ConfigErrors, TheFileItselfNamesWhatIsWrongWithIt) {
  test::TempDir dir;
  EXPECT_EQ(diagnostics_of(dir / "none.yaml"),
            V{"none.yaml: error: cannot read the pipeline file: No such file or directory"});
  std::filesystem::create_directory(dir / "folder.yaml");
  EXPECT_EQ(diagnostics_of(dir / "folder.yaml"), V{"folder.yaml: error: is a folder, not a pipeline file"});
  // A binary file: no byte of it reaches the terminal, NUL least of all.
  const char bytes[] = "schema: \x7f" "ELF\x02\x01\0\0\x1b[31m";
  const std::string binary(bytes, sizeof bytes - 1);
  dir.write("binary.yaml", binary);
  EXPECT_EQ(diagnostics_of(dir / "binary.yaml"),
            V{"binary.yaml:1:15: error: not a text file (a NUL byte here): a pipeline is a YAML text file"});
  dir.write("escape.yaml", "schema: uvflow/1\n\x1b[2J: 1\nstages: [{id: a, type: io.simulate}]\n");
  EXPECT_EQ(diagnostics_of(dir / "escape.yaml"),
            V{"escape.yaml:2:1: error: unknown top-level key '\\x1b[2J'"});
}

TEST(ConfigErrors, OverridesOfUnknownVariablesAndRunKeysAreErrors) {
  EXPECT_EQ(diagnostics("vars.yaml", {"vars.npx=512", "run.max_inflight=2", "vars.npix=512"}),
            (V{"--set run.max_inflight=2: error: unknown key 'run.max_inflight' (did you mean 'max_in_flight'?)",
               "--set vars.npx=512: error: no variable 'npx' to set (did you mean 'npix'?)"}));
  EXPECT_EQ(diagnostics("missing_input.yaml", {"vars.npix=512"}),
            (V{"--set vars.npix=512: error: no variable 'npix' to set; the pipeline has no vars",
               "missing_input.yaml:4:5: error: stage 'grid' (grid.serial): input 'kernels' (KernelStack, once) is "
               "not connected; add 'in: {kernels: STAGE}'"}));
}

// A choice: the option chosen by its ${var} or by --set ID.choose; readers of ID.NAME linked to the
// chosen option's stage; the others' stages not in the plan, and a --set of one of them refused.
TEST(ConfigErrors, ChoicesLinkTheChosenOptionAndRefuseTheRest) {
  Registry reg;
  register_builtin_stages(reg);
  const auto file = test::source_dir() / "tests/configs/choice.yaml";
  auto reader = [](const Plan& p) { return p.stages[size_t(p.stages[size_t(p.index_of("fits"))].inputs.at(0).from)].id; };
  const Plan wproj = load_plan(file, {}, reg);
  EXPECT_EQ(reader(wproj), "corr");
  EXPECT_EQ(wproj.index_of("wstack"), -1);
  ASSERT_EQ(wproj.choices.size(), 1u);
  EXPECT_EQ(wproj.choices[0].chosen, "wproj");
  for (auto set : {"vars.method=wstack", "imaging.choose=wstack"}) {
    const Plan wstack = load_plan(file, {set}, reg);
    EXPECT_EQ(reader(wstack), "wstack") << set;
    EXPECT_EQ(wstack.index_of("kernels"), -1) << set;
    EXPECT_EQ(wstack.stages.size(), 3u) << set;
  }
  EXPECT_EQ(diagnostics("choice.yaml", {"vars.method=wstack", "kernels.oversample=8"}),
            V{"--set kernels.oversample=8: error: stage 'kernels' is in choice 'imaging' option 'wproj', which is not "
              "chosen: the setting would have no effect"});
  EXPECT_EQ(diagnostics("choice.yaml", {"imaging.epsilon=1e-3"}),
            V{"--set imaging.epsilon=1e-3: error: choice 'imaging' has one setting, 'imaging.choose'"});
  EXPECT_EQ(diagnostics("choice_errors.yaml"),
            (V{"choice_errors.yaml:5:13: error: choice 'imaging': no option 'wstak'; the options are wproj, wstack, or "
               "auto (did you mean 'wstack'?)",
               "choice_errors.yaml:15:9: error: choice 'imaging' option 'wstack': unknown key 'inputs'",
               "choice_errors.yaml:14:18: error: choice 'imaging' option 'wstack' gives outputs extra, picture, option "
               "'wproj' gives image: every option must give the same, so that a switch leaves no reader unconnected"}));
  EXPECT_EQ(diagnostics("choice_errors.yaml", {"imaging.choose=wstack"}),
            (V{"choice_errors.yaml:15:9: error: choice 'imaging' option 'wstack': unknown key 'inputs'",
               "choice_errors.yaml:14:18: error: choice 'imaging' option 'wstack' gives outputs extra, picture, option "
               "'wproj' gives image: every option must give the same, so that a switch leaves no reader unconnected",
               "choice_errors.yaml:16:77: error: stage 'fits' (io.write_fits): input 'image': choice 'imaging' has no "
               "output 'image'"}));
}

// A plugin is looked for next to the pipeline file and in --plugin-path, never in the working
// directory (cli_test plants one there).
TEST(ConfigErrors, PluginsAreNotLookedForInTheWorkingDirectory) {
  EXPECT_EQ(diagnostics("plugin_elsewhere.yaml"),
            (V{"plugin_elsewhere.yaml:2:11: error: plugin 'test_stages_plugin.so' not found (looked for "
               "test_stages_plugin.so; a relative plugin path is next to the pipeline file or in a --plugin-path "
               "folder)",
               "plugin_elsewhere.yaml:4:21: error: unknown stage type 'test.source'; 'uvflow stages' lists them"}));
}

TEST(ConfigErrors, ValidPipelinesHaveNone) {
  Registry reg;
  register_builtin_stages(reg);
  for (auto& e : std::filesystem::directory_iterator(test::source_dir() / "pipelines"))
    if (e.path().extension() == ".yaml") {
      EXPECT_NO_THROW(load_plan(e.path(), {}, reg)) << e.path();
    }
}
