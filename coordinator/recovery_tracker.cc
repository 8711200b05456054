#include "coordinator/recovery_tracker.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ringmaster::coordinator {

std::string RecoveryPhases::ToString() const {
  return absl::StrFormat(
      "%.2f s: detect %.2f, place %.2f, stop %.2f, rendezvous %.2f, link check %.2f, restore "
      "%.2f, first step %.2f",
      total, detect, place, stop, rendezvous, link_check, restore, first_step);
}

void RecoveryTracker::OnFailure(absl::Time failed_at, absl::Time decided_at) {
  failed_at_ = std::min(failed_at, decided_at);
  decided_at_ = decided_at;
  launched_at_.reset();
  started_.clear();
}

void RecoveryTracker::OnLaunch(int world, absl::Time at) {
  if (!first_launch_.has_value()) first_launch_ = at;
  world_ = world;
  started_.clear();
  launched_at_ = at;
  last_end_.reset();
}

std::optional<RecoveryPhases> RecoveryTracker::OnWorkerStarted(int rank,
                                                               const WorkerStartup& startup) {
  if (!failed_at_.has_value() || !launched_at_.has_value()) return std::nullopt;
  if (!started_.emplace(rank, startup).second) return std::nullopt;
  if (static_cast<int>(started_.size()) < world_) return std::nullopt;
  RecoveryPhases p;
  p.detect = absl::ToDoubleSeconds(*decided_at_ - *failed_at_);
  p.place = absl::ToDoubleSeconds(*launched_at_ - *decided_at_);
  absl::Time last_start = absl::InfinitePast();
  absl::Time last_first_step = absl::InfinitePast();
  for (const auto& [r, s] : started_) {
    last_start = std::max(last_start, s.process_start);
    p.rendezvous = std::max(p.rendezvous, s.rendezvous_seconds);
    p.link_check = std::max(p.link_check, s.link_check_seconds);
    p.restore = std::max(p.restore, s.restore_seconds);
    p.first_step = std::max(p.first_step, s.first_step_seconds);
    last_first_step =
        std::max(last_first_step,
                 s.process_start + absl::Seconds(s.rendezvous_seconds + s.link_check_seconds +
                                                 s.restore_seconds + s.first_step_seconds));
  }
  p.stop = std::max(0.0, absl::ToDoubleSeconds(last_start - *launched_at_));
  p.total = absl::ToDoubleSeconds(last_first_step - *failed_at_);
  failed_at_.reset();
  decided_at_.reset();
  return p;
}

void RecoveryTracker::OnStep(int64_t step, absl::Time end, double first_step_seconds) {
  if (step <= last_step_) return;
  productive_seconds_ += last_end_.has_value()
                             ? std::max(0.0, absl::ToDoubleSeconds(end - *last_end_))
                             : first_step_seconds;
  last_end_ = end;
  last_step_ = step;
  productive_at_step_[step] = productive_seconds_;
}

void RecoveryTracker::OnResume(int64_t start_step) {
  // Work past the checkpoint was lost: take it back.
  auto kept = productive_at_step_.upper_bound(start_step);
  if (kept != productive_at_step_.begin()) {
    productive_seconds_ = std::prev(kept)->second;
  } else if (kept != productive_at_step_.end() && kept->first > 0) {
    // Older than the history (OnCheckpoint dropped it): pro rata of its oldest step.
    productive_seconds_ = kept->second * static_cast<double>(std::max<int64_t>(0, start_step)) /
                          static_cast<double>(kept->first);
  } else {
    productive_seconds_ = 0;
  }
  productive_at_step_.erase(kept, productive_at_step_.end());
  last_step_ = start_step;
  last_end_.reset();
}

void RecoveryTracker::OnCheckpoint(int64_t step) {
  constexpr size_t kCheckpointsKept = 3;
  if (!checkpoints_.empty() && step <= checkpoints_.back()) return;
  checkpoints_.push_back(step);
  if (checkpoints_.size() > kCheckpointsKept) checkpoints_.pop_front();
  if (checkpoints_.size() < kCheckpointsKept) return;
  // A resume at the oldest kept checkpoint or later reads the newest entry at or before it: keep
  // that one, drop what is older.
  auto floor = productive_at_step_.upper_bound(checkpoints_.front());
  if (floor == productive_at_step_.begin()) return;
  productive_at_step_.erase(productive_at_step_.begin(), std::prev(floor));
}

double RecoveryTracker::Goodput(absl::Time now) const {
  if (!first_launch_.has_value()) return 0;
  const double wall = absl::ToDoubleSeconds(now - *first_launch_);
  if (wall <= 0) return 0;
  return std::clamp(productive_seconds_ / wall, 0.0, 1.0);
}

}  // namespace ringmaster::coordinator
