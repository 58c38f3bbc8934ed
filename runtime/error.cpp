#include "runtime/error.hpp"

namespace uvflow {

std::string SourcePos::str() const {
  std::string s = file.empty() ? std::string("<pipeline>") : file;
  if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(col);
  return s;
}

static std::string join(const std::vector<Diagnostic>& diags) {
  std::string s;
  for (const auto& d : diags) s += (s.empty() ? "" : "\n") + d.str();
  return s;
}

ConfigError::ConfigError(std::vector<Diagnostic> diags)
    : std::runtime_error(join(diags)), diags_(std::move(diags)) {}

static std::string stage_message(const std::string& stage, const std::string& backend,
                                 const std::string& device, long long item,
                                 const std::string& what) {
  std::string s = "stage '" + stage + "' (backend " + backend;
  if (!device.empty()) s += ", " + device;
  s += item >= 0 ? ", item " + std::to_string(item) : std::string(", end of stream");
  return s + "): " + what;
}

StageError::StageError(std::string stage, std::string backend, std::string device, long long item,
                       std::string what, ExitCode code)
    : std::runtime_error(stage_message(stage, backend, device, item, what)),
      stage_(std::move(stage)),
      backend_(std::move(backend)),
      device_(std::move(device)),
      reason_(std::move(what)),
      item_(item),
      code_(code) {}

}  // namespace uvflow
