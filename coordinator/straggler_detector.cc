#include "coordinator/straggler_detector.h"

#include <algorithm>
#include <vector>

namespace ringmaster::coordinator {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

double StragglerDetector::Level(const Rank& r) const {
  return Median(std::vector<double>(r.samples.begin(), r.samples.end()));
}

std::optional<StragglerDetector::Change> StragglerDetector::Add(int rank, int group,
                                                                double mean_compute_seconds) {
  if (!(mean_compute_seconds > 0)) return std::nullopt;
  Rank& r = ranks_[rank];
  r.group = group;
  r.samples.push_back(mean_compute_seconds);
  ++r.count;
  while (static_cast<int>(r.samples.size()) > options_.window) r.samples.pop_front();
  if (static_cast<int>(r.samples.size()) < options_.min_samples) return std::nullopt;

  std::vector<double> others;
  bool alone = true;
  for (const auto& [other, o] : ranks_) {
    if (other == rank || o.group != group) continue;
    alone = false;
    if (static_cast<int>(o.samples.size()) >= options_.min_samples) others.push_back(Level(o));
  }
  if (alone && r.baseline == 0 && r.count >= options_.min_samples + options_.window) {
    r.baseline = Level(r);
  }
  const bool against_baseline = alone && r.baseline > 0;
  if (others.empty() && !against_baseline) return std::nullopt;
  const double reference = against_baseline ? r.baseline : Median(others);
  if (reference <= 0) return std::nullopt;
  const double ratio = Level(r) / reference;
  ratios_[rank] = ratio;

  const double clear_below = 1 + (options_.threshold - 1) / 2;
  const bool pointing_other_way = r.flagged ? ratio < clear_below : ratio >= options_.threshold;
  r.streak = pointing_other_way ? r.streak + 1 : 0;
  if (r.streak < options_.hysteresis) return std::nullopt;
  r.flagged = !r.flagged;
  r.streak = 0;
  return Change{rank, r.flagged, ratio, against_baseline};
}

bool StragglerDetector::flagged(int rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && it->second.flagged;
}

double StragglerDetector::ratio(int rank) const {
  auto it = ratios_.find(rank);
  return it == ratios_.end() ? 0 : it->second;
}

}  // namespace ringmaster::coordinator
