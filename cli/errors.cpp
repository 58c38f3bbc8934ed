#include "cli/errors.hpp"

#include <csignal>
#include <cstring>
#include <new>

#include "graph/pipeline.hpp"

namespace uvflow {

std::string config_error_text(const ConfigError& e) {
  std::string s;
  for (auto& d : e.diagnostics()) s += d.str() + "\n";
  const auto n = e.diagnostics().size();
  return s + std::to_string(n) + (n == 1 ? " error" : " errors") + "; nothing was run\n";
}

ErrorReport error_report(const std::exception_ptr& p, const std::string& who) {
  const auto code = [](ExitCode c) { return static_cast<int>(c); };
  try {
    std::rethrow_exception(p);
  } catch (const ConfigError& e) {
    return {code(ExitCode::config), "ConfigError", config_error_text(e), true};
  } catch (const StageError& e) {
    std::string s = who + "error: " + e.what() + "\n";
    if (e.code() != ExitCode::internal)
      s += std::string("the run was cancelled") + (who.empty() ? "" : " on every rank") + "; no output file was written\n";
    return {code(e.code()), e.code() == ExitCode::internal ? "InternalError" : "StageError", s};
  } catch (const Interrupted& e) {
    const std::string sig = e.signal() == SIGINT ? "" : std::string(" (SIG") + sigabbrev_np(e.signal()) + ")";
    return {e.exit_code(), "Interrupted", "interrupted" + sig + ": the run was cancelled; no output file was written\n", true};
  } catch (const OutputError& e) {
    return {code(ExitCode::runtime), "OutputError", who + "error: " + e.what() + "\n"};
  } catch (const InputError& e) {
    return {code(ExitCode::input), "InputError", who + "error: " + e.what() + "\n"};
  } catch (const std::bad_alloc& e) {
    return {code(ExitCode::runtime), "MemoryError", who + "error: " + error_text(e) + "\n"};
  } catch (const std::exception& e) {
    return {code(ExitCode::internal), "InternalError", who + "internal error: " + e.what() + "\n"};
  }
}

std::string unknown_stage_text(const std::string& type, const Registry& registry) {
  const std::string c = closest(type, registry.types());
  return "error: unknown stage type '" + type + "'" + (c.empty() ? "" : " (did you mean '" + c + "'?)") + "\n";
}

}  // namespace uvflow
