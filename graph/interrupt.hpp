// Signals. SIGINT (Ctrl-C), SIGTERM, SIGHUP and SIGQUIT interrupt a run: the handler only records
// which arrived; a running graph polls it and cancels, and the process exits 128 + its number
// (Interrupted::exit_code). SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT are crashes (in a stage,
// a plugin's too): the handler writes which stage and item the crashing thread was running (a
// CrashScope the stage's node opened), or else which were running, and the signal then ends the
// process as it would have (exit 139, 134, ...). The crash handler runs on a signal stack of its
// own in every thread that runs stages, so a stack overflow is reported too.
#pragma once

#include <csignal>
#include <cstddef>

namespace uvflow {

void install_signal_handlers();
void request_interrupt(int signo = SIGINT);  // what the handler does (tests call it directly)
int interrupt_signal();                      // the signal that interrupted, 0 when none
bool interrupt_requested();
void clear_interrupt();  // when a run ends, so a later run in the same process starts clean

// While one is alive, a crash in this thread is reported as being in `what` ("stage 'grid'
// (backend cpu, item 7)"), which the constructor copies (truncated to fit). Nests: the innermost
// is reported. Crashes in threads with none name every scope open in the process.
class CrashScope {
 public:
  explicit CrashScope(const char* what);
  ~CrashScope();
  CrashScope(const CrashScope&) = delete;
  CrashScope& operator=(const CrashScope&) = delete;

 private:
  char text_[192];
  const char* previous_;
  int slot_;  // in the process-wide list, -1 when it was full
};

}  // namespace uvflow
