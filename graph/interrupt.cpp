#include "graph/interrupt.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace uvflow {
namespace {

std::atomic<int> g_signal{0};
extern "C" void on_interrupt(int sig) { g_signal.store(sig); }

// The crash handler may only read what is already there: a pointer in this thread's storage
// (initial-exec TLS, no lazy allocation inside a handler) and a fixed array of open scopes.
constexpr int kSlots = 64;
std::atomic<const char*> g_open[kSlots];
thread_local const char* t_current __attribute__((tls_model("initial-exec"))) = nullptr;

void put(const char* s) {
  for (std::size_t n = std::strlen(s); n > 0;) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= std::size_t(w);
  }
}

const char* crash_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGFPE: return "SIGFPE (arithmetic fault)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGABRT: return "SIGABRT (aborted)";
    default: return "a fatal signal";
  }
}

extern "C" void on_crash(int sig) {
  // Async-signal-safe: write(2) of text formatted before the crash, then the default action.
  put("\nfatal: ");
  put(crash_name(sig));
  if (const char* where = t_current) {
    put(" in ");
    put(where);
  } else {
    bool any = false;
    for (auto& s : g_open)
      if (const char* w = s.load(std::memory_order_relaxed)) {
        put(any ? "; " : " while running ");
        put(w);
        any = true;
      }
  }
  put("; no output file was written (the next run removes the temporaries)\n");
  signal(sig, SIG_DFL);
  raise(sig);  // delivered when the handler returns; a fault recurs at the faulting instruction
}

// A stack overflow faults with no stack left to run the handler on, so each thread that runs
// stages gets its own signal stack, made the first time it opens a scope (TBB creates the worker
// threads, so no earlier hook exists) and unregistered before the thread frees it.
class AltStack {
 public:
  AltStack() : memory_(std::malloc(kSize)) {
    if (!memory_) return;  // no stack: the crash still ends the process, unreported
    stack_t ss{};
    ss.ss_sp = memory_;
    ss.ss_size = kSize;
    if (sigaltstack(&ss, nullptr) != 0) {
      std::free(memory_);
      memory_ = nullptr;
    }
  }
  ~AltStack() {
    if (!memory_) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    std::free(memory_);
  }
  AltStack(const AltStack&) = delete;
  AltStack& operator=(const AltStack&) = delete;

 private:
  static constexpr std::size_t kSize = 64 * 1024;  // the handler needs a few hundred bytes
  void* memory_;
};

void ensure_alt_stack() { thread_local AltStack stack; }

}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);
  struct sigaction crash {};
  crash.sa_handler = on_crash;
  crash.sa_flags = SA_ONSTACK;
  sigemptyset(&crash.sa_mask);
  ensure_alt_stack();
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &crash, nullptr);
}

void request_interrupt(int signo) { g_signal.store(signo); }
int interrupt_signal() { return g_signal.load(); }
bool interrupt_requested() { return g_signal.load() != 0; }
void clear_interrupt() { g_signal.store(0); }

CrashScope::CrashScope(const char* what) : previous_(t_current), slot_(-1) {
  ensure_alt_stack();
  std::strncpy(text_, what, sizeof text_ - 1);
  text_[sizeof text_ - 1] = '\0';
  t_current = text_;
  for (int i = 0; i < kSlots; ++i) {
    const char* expected = nullptr;
    if (g_open[i].compare_exchange_strong(expected, text_)) {
      slot_ = i;
      break;
    }
  }
}

CrashScope::~CrashScope() {
  if (slot_ >= 0) g_open[slot_].store(nullptr);
  t_current = previous_;
}

}  // namespace uvflow
