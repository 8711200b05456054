// Orderly shutdown on SIGTERM/SIGINT for every long-running binary.
//
// Call BlockTerminationSignals() first thing in main(), before any thread starts, so that every
// thread inherits the blocked mask; later call WaitForTerminationSignal() from main's thread,
// which returns the signal number once SIGTERM or SIGINT arrives. No async signal handler runs.
#ifndef RINGMASTER_COMMON_SIGNALS_H_
#define RINGMASTER_COMMON_SIGNALS_H_

namespace ringmaster {

void BlockTerminationSignals();
int WaitForTerminationSignal();

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_SIGNALS_H_
