#include "coordinator/straggler_detector.h"

#include <vector>

#include "coordinator/median.h"

namespace ringmaster::coordinator {

double StragglerDetector::Level(const Rank& r) const {
  return Median(std::vector<double>(r.samples.begin(), r.samples.end()));
}

std::optional<StragglerDetector::Change> StragglerDetector::Add(int rank, int group, int group_size,
                                                                double mean_compute_seconds,
                                                                double step_seconds, int64_t step) {
  if (!(mean_compute_seconds > 0)) return std::nullopt;
  Rank& r = ranks_[rank];
  if (step > 0) {
    if (step <= r.last_step) return std::nullopt;  // a repeat: no step since the last sample
    r.last_step = step;
  }
  r.group = group;
  r.alone = group_size == 1;
  r.samples.push_back(mean_compute_seconds);
  ++r.count;
  while (static_cast<int>(r.samples.size()) > options_.window) r.samples.pop_front();
  if (step_seconds > 0) {
    r.step_samples.push_back(step_seconds);
    while (static_cast<int>(r.step_samples.size()) > options_.window) r.step_samples.pop_front();
  }
  if (static_cast<int>(r.samples.size()) < options_.min_samples) return std::nullopt;

  if (r.alone && r.baseline == 0 && r.count >= options_.min_samples + options_.window) {
    r.baseline = Level(r);
  }
  // What the rank is compared with: its group's other ranks' levels, or (alone) the other lone
  // ranks' slowdowns.
  std::vector<double> others;
  for (const auto& [other, o] : ranks_) {
    if (other == rank) continue;
    if (r.alone) {
      if (o.alone && o.baseline > 0) others.push_back(Level(o) / o.baseline);
    } else if (o.group == group && static_cast<int>(o.samples.size()) >= options_.min_samples) {
      others.push_back(Level(o));
    }
  }
  if (others.empty() || (r.alone && r.baseline == 0)) return std::nullopt;
  const double reference = Median(others);
  if (reference <= 0) return std::nullopt;
  const double ratio = (r.alone ? Level(r) / r.baseline : Level(r)) / reference;
  ratios_[rank] = ratio;
  // The compute its peers' suggest for it (alone: its baseline, slowed as the other stages
  // were); the rest is what the group waits for it, which must matter against its step time.
  const double expected = r.alone ? r.baseline * reference : reference;
  const bool material =
      r.step_samples.empty() ||
      Level(r) - expected >=
          options_.min_step_share *
              Median(std::vector<double>(r.step_samples.begin(), r.step_samples.end()));

  const double clear_below = 1 + (options_.threshold - 1) / 2;
  const bool pointing_other_way =
      r.flagged ? ratio < clear_below || !material : ratio >= options_.threshold && material;
  r.streak = pointing_other_way ? r.streak + 1 : 0;
  if (r.streak < options_.hysteresis) return std::nullopt;
  r.flagged = !r.flagged;
  r.streak = 0;
  return Change{rank, r.flagged, ratio, r.alone};
}

bool StragglerDetector::flagged(int rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && it->second.flagged;
}

double StragglerDetector::level(int rank) const {
  auto it = ranks_.find(rank);
  return it == ranks_.end() || it->second.samples.empty() ? 0 : Level(it->second);
}

double StragglerDetector::ratio(int rank) const {
  auto it = ratios_.find(rank);
  return it == ratios_.end() ? 0 : it->second;
}

}  // namespace ringmaster::coordinator
