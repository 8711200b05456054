#include "coordinator/flap_damping.h"

#include <algorithm>

namespace ringmaster::coordinator {

absl::Duration SettleHold(int losses, const FlapDamping& damping) {
  if (losses < 2 || damping.hold <= absl::ZeroDuration()) return absl::ZeroDuration();
  absl::Duration hold = damping.hold;
  for (int i = 2; i < losses && hold < damping.window; ++i) hold *= 2;
  return std::min(hold, damping.window);
}

void FlapHistory::Lost(absl::Time at, const FlapDamping& damping) {
  losses_.insert(std::upper_bound(losses_.begin(), losses_.end(), at), at);
  while (!losses_.empty() && losses_.front() <= at - damping.window) losses_.pop_front();
  while (losses_.size() > kMaxLosses) losses_.pop_front();
}

int FlapHistory::RecentLosses(absl::Time now, const FlapDamping& damping) const {
  return static_cast<int>(std::count_if(losses_.begin(), losses_.end(), [&](absl::Time t) {
    return t > now - damping.window && t <= now;
  }));
}

std::optional<absl::Time> FlapHistory::SettlingUntil(absl::Time now,
                                                     const FlapDamping& damping) const {
  if (!registered_.has_value()) return std::nullopt;
  const absl::Duration hold = SettleHold(RecentLosses(now, damping), damping);
  if (hold <= absl::ZeroDuration() || now >= *registered_ + hold) return std::nullopt;
  return *registered_ + hold;
}

}  // namespace ringmaster::coordinator
