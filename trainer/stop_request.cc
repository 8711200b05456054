#include "trainer/stop_request.h"

#include <signal.h>

#include <atomic>

namespace ringmaster::trainer {
namespace {

// Lock-free, so the handler may set it (async-signal-safe).
std::atomic<bool> requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void OnStopSignal(int) { requested.store(true, std::memory_order_relaxed); }

}  // namespace

void InstallStopRequestHandler() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls in flight go on; the loop reads the flag
  sigaction(SIGUSR1, &action, nullptr);
}

bool StopRequested() { return requested.load(std::memory_order_relaxed); }

void ClearStopRequest() { requested.store(false, std::memory_order_relaxed); }

}  // namespace ringmaster::trainer
