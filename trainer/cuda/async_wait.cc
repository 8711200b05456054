#include "trainer/cuda/async_wait.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {

absl::Duration PollPause(int n) {
  constexpr int kSpins = 100;
  if (n < kSpins) return absl::ZeroDuration();
  const int doublings = std::min(n - kSpins, 3);  // 10 us * 2^3 = 80 us, capped below
  return std::min(absl::Microseconds(10) * (1 << doublings), absl::Microseconds(50));
}

absl::Status AwaitCompletion(const std::function<Poll()>& poll, absl::string_view what,
                             const WaitOptions& options) {
  const absl::Time deadline = options.clock->Now() + options.timeout;
  for (int n = 0;; ++n) {
    Poll p = poll();
    if (p.state == PollState::kDone) return absl::OkStatus();
    if (p.state == PollState::kFailed) {
      return p.error.ok() ? absl::InternalError(absl::StrCat(what, ": failed without a reason"))
                          : p.error;
    }
    if (options.abandoned != nullptr && options.abandoned->load()) {
      return absl::CancelledError(absl::StrCat(what, ": abandoned before it completed"));
    }
    if (options.clock->Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not complete within ", absl::FormatDuration(options.timeout)));
    }
    const absl::Duration pause = PollPause(n);
    if (pause <= absl::ZeroDuration()) {
      std::this_thread::yield();
    } else if (options.sleep) {
      options.sleep(pause);
    } else {
      absl::SleepFor(pause);
    }
  }
}

}  // namespace ringmaster::trainer
