#include "runtime/error.hpp"

#include <cstdio>

namespace uvflow {

std::string SourcePos::str() const {
  std::string s = file.empty() ? std::string("<pipeline>") : file;
  if (line > 0) s.append(":").append(std::to_string(line)).append(":").append(std::to_string(col));
  return s;
}

static std::string join(const std::vector<Diagnostic>& diags) {
  std::string s;
  for (const auto& d : diags) {
    if (!s.empty()) s += '\n';
    s += d.str();
  }
  return s;
}

ConfigError::ConfigError(std::vector<Diagnostic> diags)
    : std::runtime_error(join(diags)), diags_(std::move(diags)) {}

static std::string stage_message(const std::string& stage, const std::string& backend,
                                 const std::string& device, long long item,
                                 const std::string& what) {
  std::string s = "stage '" + stage + "' (backend " + backend;
  if (!device.empty()) s += ", " + device;
  s += item >= 0                     ? ", item " + std::to_string(item)
       : item == StageError::kSetup ? std::string(", setup")
       : item == StageError::kStart ? std::string(", start")
                                    : std::string(", end of stream");
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

std::string bytes_text(std::uint64_t bytes) {
  char b[32];
  if (bytes >= (1ull << 30)) std::snprintf(b, sizeof b, "%.1f GiB", double(bytes) / double(1ull << 30));
  else if (bytes >= (1ull << 20)) std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / double(1ull << 20));
  else if (bytes >= (1ull << 10)) std::snprintf(b, sizeof b, "%.1f KiB", double(bytes) / double(1ull << 10));
  else std::snprintf(b, sizeof b, "%llu bytes", static_cast<unsigned long long>(bytes));
  return b;
}

OutOfMemory::OutOfMemory(std::size_t bytes, std::string what)
    : bytes_(bytes),
      text_("out of memory: could not allocate " + (bytes ? bytes_text(bytes) + " for " : std::string()) + std::move(what)) {}

std::string error_text(const std::exception& e) {
  if (dynamic_cast<const OutOfMemory*>(&e)) return e.what();
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return "out of memory (" + std::string(e.what()) + "; the size asked for is not known here)";
  return e.what();
}

}  // namespace uvflow
