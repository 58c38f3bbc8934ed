// The stage registry: built-in stages are added explicitly from one list
// (stages/builtin.hpp declares it: runtime knows no stage); plugins are shared libraries with one
// versioned extern "C" entry point.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/stage.hpp"

// Bump when Stage, Context, Payload or the payload structs change layout or meaning.
#define UVFLOW_PLUGIN_ABI_VERSION 3

namespace uvflow {

class Registry {
 public:
  // Throws std::logic_error on a duplicate type or an ill-formed spec.
  void add(StageSpec spec);
  const StageSpec* find(std::string_view type) const;
  std::vector<std::string> types() const;
  // Loads a plugin and registers its stages; throws InputError naming the file on any problem.
  void load_plugin(const std::filesystem::path& path);
  const std::vector<std::filesystem::path>& plugins() const { return plugins_; }

 private:
  std::map<std::string, StageSpec, std::less<>> specs_;
  std::vector<std::filesystem::path> plugins_;
  std::vector<std::shared_ptr<void>> handles_;  // dlopen handles, kept open for the process
};

// What a plugin's entry point returns.
struct PluginInfo {
  int abi_version;       // UVFLOW_PLUGIN_ABI_VERSION the plugin was built against
  const char* name;
  void (*register_stages)(Registry&);
};

}  // namespace uvflow

// A plugin defines exactly this function (see docs/plugins.md):
//   extern "C" const uvflow::PluginInfo* uvflow_plugin_v1();
#define UVFLOW_PLUGIN_ENTRY "uvflow_plugin_v1"
#define UVFLOW_PLUGIN(NAME, REGISTER_FN)                                                 \
  extern "C" __attribute__((visibility("default"))) const uvflow::PluginInfo* uvflow_plugin_v1() { \
    static const uvflow::PluginInfo info{UVFLOW_PLUGIN_ABI_VERSION, NAME, REGISTER_FN};   \
    return &info;                                                                         \
  }
