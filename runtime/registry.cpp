#include "runtime/registry.hpp"

#include <dlfcn.h>

#include <set>

#include "runtime/error.hpp"

namespace uvflow {

static void check_spec(const StageSpec& s) {
  auto bad = [&](const std::string& why) {
    throw std::logic_error("stage spec '" + s.type + "': " + why);
  };
  if (s.type.find('.') == std::string::npos) bad("type must be domain.name");
  if (s.backends.empty()) bad("no backend");
  std::set<std::string> seen;
  for (auto& p : s.inputs)
    if (!seen.insert("in:" + p.name).second) bad("duplicate input " + p.name);
  for (auto& p : s.outputs) {
    if (!seen.insert("out:" + p.name).second) bad("duplicate output " + p.name);
    if (p.optional) bad("outputs cannot be optional");
  }
  for (auto& p : s.params) {
    if (!seen.insert("param:" + p.name).second) bad("duplicate parameter " + p.name);
    if (p.type == ParamType::choice && p.choices.empty()) bad(p.name + ": choice without choices");
  }
}

void Registry::add(StageSpec spec) {
  check_spec(spec);
  std::string t = spec.type;
  if (!specs_.emplace(t, std::move(spec)).second)
    throw std::logic_error("stage type '" + t + "' registered twice");
}

const StageSpec* Registry::find(std::string_view type) const {
  auto it = specs_.find(type);
  return it == specs_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::types() const {
  std::vector<std::string> v;
  for (auto& [k, _] : specs_) v.push_back(k);
  return v;
}

void Registry::load_plugin(const std::filesystem::path& path) {
  for (auto& p : plugins_)
    if (std::filesystem::equivalent(p, path)) return;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw InputError("cannot load plugin " + path.string() + ": " + dlerror());
  std::shared_ptr<void> handle(h, [](void*) {});  // never unloaded: its code backs live stages
  using Entry = const PluginInfo* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(h, UVFLOW_PLUGIN_ENTRY));
  if (!entry)
    throw InputError("plugin " + path.string() + " has no entry point " UVFLOW_PLUGIN_ENTRY
                     " (define it with UVFLOW_PLUGIN)");
  const PluginInfo* info = entry();
  if (!info || info->abi_version != UVFLOW_PLUGIN_ABI_VERSION)
    throw InputError("plugin " + path.string() + " was built for plugin ABI " +
                     std::to_string(info ? info->abi_version : -1) + ", this uvflow has ABI " +
                     std::to_string(UVFLOW_PLUGIN_ABI_VERSION) + ": rebuild it");
  try {
    info->register_stages(*this);
  } catch (const std::exception& e) {
    throw InputError("plugin " + path.string() + " (" + info->name + "): " + e.what());
  }
  plugins_.push_back(path);
  handles_.push_back(handle);
}

}  // namespace uvflow
