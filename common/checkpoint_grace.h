// How long workers may take to checkpoint and exit after SIGUSR1 (a drain, an agent leaving): one
// bound for the flags that set it (the coordinator's --drain_checkpoint_grace, the agent's
// --leave_checkpoint_grace) and one reading of a value received from the other side.
#ifndef RINGMASTER_COMMON_CHECKPOINT_GRACE_H_
#define RINGMASTER_COMMON_CHECKPOINT_GRACE_H_

#include <algorithm>
#include <cmath>

#include "absl/time/time.h"

namespace ringmaster {

// A day.
inline constexpr double kMaxCheckpointGraceSeconds = 86400;

// A received grace as the receiver uses it: 0 unless positive and finite, at most a day.
inline absl::Duration CheckpointGrace(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0) return absl::ZeroDuration();
  return absl::Seconds(std::min(seconds, kMaxCheckpointGraceSeconds));
}

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_CHECKPOINT_GRACE_H_
