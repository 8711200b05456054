// Time source, injected through constructors so that time-dependent logic (heartbeat loss,
// hang timeouts) is testable without sleeping.
#ifndef RINGMASTER_COMMON_CLOCK_H_
#define RINGMASTER_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ringmaster {

// Thread-safe in every implementation.
class Clock {
 public:
  virtual ~Clock() = default;
  // The time on this clock: wall-clock time for Real() (timestamps shown to users), see Steady()
  // for that one's, and whatever a test sets for FakeClock.
  virtual absl::Time Now() const = 0;
  // Returns the process-wide real clock; never null, never destroyed.
  static Clock* Real();
  // Returns the process-wide steady clock; never null, never destroyed. It reads as wall time
  // (the wall time when first used, advanced since by the monotonic clock), but setting the
  // system clock (an NTP step, a VM resumed) never moves it: for silences and timeouts, which a
  // step would fake or hide. It differs from wall time by every step since it was first used, so
  // it is never for timestamps shown to users or compared with another machine's.
  static Clock* Steady();
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24 * 365 * 56))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_CLOCK_H_
