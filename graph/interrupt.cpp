#include "graph/interrupt.hpp"

#include <atomic>
#include <csignal>

namespace uvflow {
namespace {

std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) { g_interrupt.store(true); }

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void request_interrupt() { g_interrupt.store(true); }
bool interrupt_requested() { return g_interrupt.load(); }
void clear_interrupt() { g_interrupt.store(false); }

}  // namespace uvflow
