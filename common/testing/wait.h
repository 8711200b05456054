// Waiting on a condition with a deadline, the only way tests wait (never a bare sleep).
#ifndef RINGMASTER_COMMON_TESTING_WAIT_H_
#define RINGMASTER_COMMON_TESTING_WAIT_H_

#include <algorithm>
#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ringmaster::testing {

// Re-evaluates `condition` (with a short growing backoff between tries, capped at 100 ms) until
// it returns true or `timeout` passes. Returns whether it became true.
inline bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Milliseconds(5);
  for (;;) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(std::min(backoff, deadline - absl::Now()));
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
  }
}

}  // namespace ringmaster::testing

#endif  // RINGMASTER_COMMON_TESTING_WAIT_H_
