#include "coordinator/link_watch.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "coordinator/median.h"

namespace ringmaster::coordinator {

double LinkWatch::baseline_step_seconds() const {
  const double base = LearntBaseline();
  return base > 0 ? std::max(base, floor_) : 0;
}

double LinkWatch::LearntBaseline() const {
  if (static_cast<int>(base_.size()) < 2 * options_.min_samples) return 0;
  std::vector<double> steps;
  steps.reserve(base_.size());
  for (const LinkWatchSample& s : base_) steps.push_back(s.step_seconds);
  return Median(std::move(steps));
}

void LinkWatch::Slide(absl::Time now) {
  // The window: from the newest sample back, everything of the last `window`, and more until it
  // covers window_steps distinct steps.
  std::set<int64_t> steps;
  size_t keep = 0;
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    if (it->at < now - options_.window && static_cast<int>(steps.size()) >= options_.window_steps) {
      break;
    }
    steps.insert(it->sample.step);
    ++keep;
  }
  while (recent_.size() > keep) {
    if (!degraded_ && !elevated_) {
      base_.push_back(recent_.front().sample);
      if (static_cast<int>(base_.size()) > options_.baseline_samples) base_.pop_front();
    }
    recent_.pop_front();
  }
}

bool LinkWatch::ComputeExplains(double rise) const {
  std::map<int, std::vector<double>> now_by_rank, base_by_rank;
  for (const Timed& t : recent_) now_by_rank[t.sample.rank].push_back(t.sample.compute_seconds);
  for (const LinkWatchSample& s : base_) base_by_rank[s.rank].push_back(s.compute_seconds);
  for (auto& [rank, samples] : now_by_rank) {
    auto base = base_by_rank.find(rank);
    if (base == base_by_rank.end()) continue;  // a rank the baseline never saw: nothing to compare
    const double compute_rise = Median(std::move(samples)) - Median(base->second);
    if (compute_rise >= options_.compute_share * rise) return true;
  }
  return false;
}

std::optional<LinkWatch::Trigger> LinkWatch::Add(const LinkWatchSample& sample, absl::Time now) {
  if (sample.step_seconds > 0) {
    if (!first_step_.has_value()) first_step_ = sample.step;
    if (sample.step > *first_step_ + options_.warmup_steps) recent_.push_back({sample, now});
  }
  Slide(now);
  const double learnt = LearntBaseline();
  const double base = baseline_step_seconds();  // the learnt one, or the accepted floor above it
  if (base > 0 && static_cast<int>(recent_.size()) >= options_.min_samples) {
    std::vector<double> steps;
    steps.reserve(recent_.size());
    for (const Timed& t : recent_) steps.push_back(t.sample.step_seconds);
    const double level = Median(std::move(steps));
    const bool high = level >= options_.rise_ratio * base;
    if (!degraded_ && high && !ComputeExplains(level - base)) {
      degraded_ = true;
      elevated_ = false;
      drop_level_ = level;
      owed_ = Trigger{Trigger::kDrop,
                      absl::StrFormat("step time %.3g s is %.2fx the job's baseline of %.3g s "
                                      "(medians of %d and %d rank reports), and no rank's "
                                      "compute time rose to explain it",
                                      level, level / base, base, static_cast<int>(recent_.size()),
                                      static_cast<int>(base_.size()))};
    } else if (!degraded_) {
      // Slower than the learnt baseline, but compute explains it or a check found no link to
      // blame: the baseline waits (a rank that computes slower now is compared with what it
      // computed before), and a slowdown that lasts becomes the norm.
      elevated_ = level >= options_.rise_ratio * learnt ||
                  (floor_ > 0 && level > learnt * options_.recover_ratio);
      if (!elevated_) {
        elevated_for_ = 0;
        floor_ = 0;  // back to the learnt baseline
      } else if (++elevated_for_ > options_.baseline_samples) {
        base_.clear();
        elevated_ = false;
        elevated_for_ = 0;
        floor_ = 0;
      }
    } else if (degraded_ && level <= options_.recover_ratio * base) {
      degraded_ = false;
      owed_.reset();
      if (unconfirmed_) {
        owed_ = Trigger{Trigger::kRecovered,
                        absl::StrFormat("step time %.3g s is back to %.2fx the job's baseline of "
                                        "%.3g s",
                                        level, level / base, base)};
      }
    }
  }
  if (owed_.has_value() && now - last_sent_ >= options_.min_interval) return owed_;
  return std::nullopt;
}

void LinkWatch::Sent(absl::Time now) {
  if (owed_.has_value()) unconfirmed_ = owed_->kind == Trigger::kDrop;
  owed_.reset();
  last_sent_ = now;
  if (degraded_) recent_.clear();  // healthy, they go on into the baseline
}

void LinkWatch::NothingFound() {
  if (!degraded_) return;
  degraded_ = false;
  unconfirmed_ = false;
  owed_.reset();
  recent_.clear();
  // The level the check found no link to blame for becomes the floor a later drop is measured
  // from; the learnt baseline stays (frozen while the job runs above it), so a link that slows
  // right after is still seen, and a slowdown that lasts is learnt as the norm as above.
  floor_ = drop_level_;
  elevated_ = true;
  elevated_for_ = 0;
}

}  // namespace ringmaster::coordinator
