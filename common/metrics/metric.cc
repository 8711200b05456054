#include "common/metrics/metric.h"

#include <algorithm>
#include <cmath>

#include "common/logging.h"

namespace ringmaster::metrics {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      bucket_counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    RM_CHECK(std::isfinite(upper_bounds_[i])) << "histogram bounds must be finite";
    RM_CHECK(i == 0 || upper_bounds_[i - 1] < upper_bounds_[i])
        << "histogram bounds must be strictly increasing";
  }
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) bucket_counts_[i].store(0);
}

void Histogram::Observe(double value) {
  // First bucket whose upper bound is >= value ("le" is inclusive); NaN lands in +Inf.
  size_t bucket = std::isnan(value)
                      ? upper_bounds_.size()
                      : std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
                            upper_bounds_.begin();
  bucket_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.Add(value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snap;
  snap.upper_bounds = upper_bounds_;
  snap.cumulative_counts.resize(upper_bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    running += bucket_counts_[i].load(std::memory_order_relaxed);
    snap.cumulative_counts[i] = running;
  }
  snap.count = running;
  snap.sum = sum_.Get();
  return snap;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  RM_CHECK(start > 0 && factor > 1 && count >= 1) << "bad exponential buckets";
  std::vector<double> bounds;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) bounds.push_back(v);
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  RM_CHECK(width > 0 && count >= 1) << "bad linear buckets";
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(start + width * i);
  return bounds;
}

}  // namespace ringmaster::metrics
