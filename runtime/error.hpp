// Errors as values with a place: every failure uvflow reports says what went wrong and where
// (file:line:col for configuration, the column for input data, stage/backend/device/item at run
// time), and maps to one process exit code per kind so scripts can tell them apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace uvflow {

// Process exit codes; documented in README.md and `uvflow --help`.
enum class ExitCode : int {
  ok = 0,
  usage = 2,        // bad command line
  config = 3,       // pipeline file invalid: nothing ran
  input = 4,        // input data unreadable or inconsistent (FITS, Measurement Set, ...)
  runtime = 5,      // a stage failed while running
  internal = 6,     // a bug in uvflow
  interrupted = 130 // Ctrl-C (128 + SIGINT)
};

// A position in a YAML source: "pipelines/x.yaml:12:7".
struct SourcePos {
  std::string file;
  int line = 0;  // 1-based; 0 = unknown
  int col = 0;   // 1-based
  std::string str() const;
};

struct Diagnostic {
  SourcePos pos;
  std::string message;
  std::string str() const { return pos.str() + ": error: " + message; }
};

// Every problem found in a pipeline before anything runs, reported together.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<Diagnostic> diags);
  const std::vector<Diagnostic>& diagnostics() const { return diags_; }

 private:
  std::vector<Diagnostic> diags_;
};

// Input data that cannot be used: names the file and the part of it (column, HDU, keyword).
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A stage failed while the graph ran: which stage, backend, device and item.
class StageError : public std::runtime_error {
 public:
  // `item`: an item's index, or one of these (-1: finish(), at the end of the stream).
  static constexpr long long kSetup = -2;  // configure() or prepare(), before the run
  static constexpr long long kStart = -3;  // a source's start()
  StageError(std::string stage, std::string backend, std::string device, long long item,
             std::string what, ExitCode code);
  const std::string& stage() const { return stage_; }
  const std::string& backend() const { return backend_; }
  const std::string& device() const { return device_; }
  long long item() const { return item_; }
  const std::string& reason() const { return reason_; }
  ExitCode code() const { return code_; }

 private:
  std::string stage_, backend_, device_, reason_;
  long long item_;
  ExitCode code_;
};

// The run was cancelled by a signal: Ctrl-C (SIGINT), SIGTERM, SIGHUP or SIGQUIT. The process
// exits 128 + the signal's number, as a shell reports a process the signal ended.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signo = 2) : std::runtime_error("interrupted"), signo_(signo) {}
  int signal() const { return signo_; }
  int exit_code() const { return 128 + signo_; }

 private:
  int signo_;
};

// An output could not be written or committed (a full disk, a folder that cannot be written):
// names the user's path and the cause. Exit code 5, like a stage that failed.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation failed where its size is known (host arrays, FFTW buffers): the message says
// what was asked for, and a stage failing with it says "out of memory" with the stage and item.
class OutOfMemory : public std::bad_alloc {
 public:
  OutOfMemory(std::size_t bytes, std::string what);  // bytes 0: not known
  const char* what() const noexcept override { return text_.c_str(); }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_;
  std::string text_;
};

// The text for an exception caught at a boundary: "out of memory ..." for any std::bad_alloc
// (with the size when it is an OutOfMemory), else e.what().
std::string error_text(const std::exception& e);

// A size in messages: "1.5 GiB", "12.0 MiB", "3.0 KiB", "512 bytes".
std::string bytes_text(std::uint64_t bytes);

}  // namespace uvflow
