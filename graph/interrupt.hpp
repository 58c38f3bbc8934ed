// Ctrl-C: the signal handler only sets a flag; a running graph polls it and cancels.
#pragma once

namespace uvflow {

void install_interrupt_handler();  // SIGINT and SIGTERM
void request_interrupt();          // what the handler does (tests call it directly)
bool interrupt_requested();
void clear_interrupt();            // when a run ends, so a later run in the same process starts clean

}  // namespace uvflow
