// Fuzz target for the pipeline loader: what `uvflow check` does with a pipeline file and --set
// overrides (load_plan, then preflight), on arbitrary bytes. A user's mistake must end in a
// ConfigError (or an InputError for a data file it names); anything else escaping is a bug (the
// command would say "internal error", exit 6), as is a crash, a hang or a leak.
//
// Input: the pipeline text; after a line "#--set" (a YAML comment, so seeds stay valid files) each
// further line is one --set KEY=VALUE. Built with clang it links libFuzzer (scripts/fuzz.sh);
// built otherwise replay_main.cpp runs files through it (the ctest pipeline_loader_fuzz_replay).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "graph/pipeline.hpp"
#include "graph/preflight.hpp"
#include "runtime/error.hpp"
#include "runtime/registry.hpp"
#include "stages/builtin.hpp"

namespace {

struct Fixture {
  uvflow::Registry registry;
  std::filesystem::path dir, file;
  Fixture() {
    uvflow::register_builtin_stages(registry);
    // A folder of its own, so that preflight finds no other pipelines next to this one.
    std::string d = (std::filesystem::temp_directory_path() / "uvflow-fuzz-XXXXXX").string();
    if (!::mkdtemp(d.data())) {
      std::perror("pipeline_loader_fuzz: scratch folder");
      std::abort();
    }
    dir = d;
    file = dir / "pipeline.yaml";
  }
  ~Fixture() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Fixture fx;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  static constexpr std::string_view marker = "\n#--set\n";
  const std::size_t cut = in.find(marker);
  const std::string_view text = in.substr(0, cut);
  std::vector<std::string> sets;
  if (cut != std::string_view::npos)
    for (std::size_t at = cut + marker.size(); at <= in.size();) {
      const std::size_t end = std::min(in.find('\n', at), in.size());
      sets.emplace_back(in.substr(at, end - at));
      at = end + 1;
    }
  std::FILE* f = std::fopen(fx.file.c_str(), "wb");
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) {
    std::perror("pipeline_loader_fuzz: writing the input");
    std::abort();
  }
  try {
    const uvflow::Plan plan = uvflow::load_plan(fx.file, sets, fx.registry, {}, /*load_plugins=*/false);
    uvflow::preflight(plan, uvflow::PreflightFor::check, fx.registry);
    (void)uvflow::plan_to_text(plan);
    (void)uvflow::plan_to_dot(plan);
  } catch (const uvflow::ConfigError&) {
  } catch (const uvflow::InputError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_loader_fuzz: %s escaped the loader: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}
