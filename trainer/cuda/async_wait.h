// Waiting for asynchronous GPU work without hanging: poll a completion until it reports done or
// failed, or a deadline passes. The NCCL communicator waits this way for its initialisation and
// for every operation, so that a lost peer ends in an error (and an abort of the communicator)
// instead of a thread blocked forever inside a CUDA or NCCL call.
//
// Pure logic with an injected clock and sleep (async_wait_test.cc runs it on a fake clock).
#ifndef RINGMASTER_TRAINER_CUDA_ASYNC_WAIT_H_
#define RINGMASTER_TRAINER_CUDA_ASYNC_WAIT_H_

#include <atomic>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace ringmaster::trainer {

enum class PollState { kPending, kDone, kFailed };

struct Poll {
  PollState state = PollState::kPending;
  absl::Status error;  // kFailed: why
};

struct WaitOptions {
  absl::Duration timeout = absl::Seconds(600);
  Clock* clock = Clock::Real();
  // Pauses between polls; null: really sleep. Tests advance a fake clock instead.
  std::function<void(absl::Duration)> sleep;
  // Set by another thread to give up (the trainer abandoning its groups after a failure): the
  // wait ends with CANCELLED at its next poll instead of waiting out the timeout. Optional.
  const std::atomic<bool>* abandoned = nullptr;
};

// The pause after poll number `n` (0-based): none for the first 100 polls (a collective of a
// few microseconds is not delayed), then 10 us doubling up to 50 us: a collective of a
// millisecond is noticed within 50 us of its end (a 1 ms cap made a 0.7 ms all-reduce read as
// 1.3 ms), and a long wait still costs only a poll (an event query) every 50 us.
absl::Duration PollPause(int n);

// Calls poll() until it returns kDone (OK) or kFailed (its error), or until options.timeout has
// passed on options.clock since the call: DEADLINE_EXCEEDED naming `what` and the timeout; or
// until *options.abandoned is set: CANCELLED. poll() is called at least once, also with a zero
// timeout (a completion already there wins over an abandonment).
absl::Status AwaitCompletion(const std::function<Poll()>& poll, absl::string_view what,
                             const WaitOptions& options);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_ASYNC_WAIT_H_
