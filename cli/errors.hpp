// What `uvflow` prints for an error that ends a command, and its exit code, for every front end
// (the command, the Python module), so that a failure reads the same wherever it happens.
#pragma once

#include <exception>
#include <string>

#include "runtime/error.hpp"
#include "runtime/registry.hpp"

namespace uvflow {

struct ErrorReport {
  int exit_code = 0;
  std::string kind;   // ConfigError, InputError, StageError, OutputError, Interrupted, MemoryError, InternalError
  std::string text;   // the lines the command prints on stderr, each ending in "\n"
  bool shared = false;  // the same on every process of a distributed run (a pipeline error, a signal)
};

// Every diagnostic, "file:line:col: error: ...", then "N errors; nothing was run".
std::string config_error_text(const ConfigError& e);

// `e` (one of runtime/error.hpp's, a std::bad_alloc or any std::exception: an internal error).
// `who` prefixes the message of a process of a distributed run ("rank 1: "); "" for one process.
ErrorReport error_report(const std::exception_ptr& e, const std::string& who = "");

// "error: unknown stage type 'X' (did you mean 'Y'?)" (`uvflow describe X`).
std::string unknown_stage_text(const std::string& type, const Registry& registry);

}  // namespace uvflow
