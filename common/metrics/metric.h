// Metric values: Counter, Gauge and Histogram.
//
// Every update is lock-free (atomic compare-and-swap on the value), so a hot loop can update a
// metric it holds a pointer to without touching any registry or family lock. Reads for exposition
// may run concurrently with updates; each value read is atomic, but a histogram's sum may be one
// observation ahead of or behind its buckets (its count is always derived from the buckets, so
// the +Inf bucket and _count always agree, as the text format requires).
#ifndef RINGMASTER_COMMON_METRICS_METRIC_H_
#define RINGMASTER_COMMON_METRICS_METRIC_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace ringmaster::metrics {

// A double that supports atomic addition (std::atomic<double>::fetch_add is C++20).
class AtomicDouble {
 public:
  explicit AtomicDouble(double v = 0) : value_(v) {}
  void Add(double delta) {
    double old = value_.load(std::memory_order_relaxed);
    while (!value_.compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
    }
  }
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double Get() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_;
};

// Monotonically increasing value. Thread-safe, lock-free.
class Counter {
 public:
  // Adds `delta`, which must be >= 0; a negative or NaN delta is ignored (counters never go down).
  void Increment(double delta = 1.0) {
    if (delta >= 0) value_.Add(delta);
  }
  double Value() const { return value_.Get(); }

 private:
  AtomicDouble value_;
};

// Value that goes up and down. Thread-safe, lock-free.
class Gauge {
 public:
  void Set(double v) { value_.Set(v); }
  void Add(double delta) { value_.Add(delta); }
  double Value() const { return value_.Get(); }

 private:
  AtomicDouble value_;
};

// Distribution over fixed upper bounds. Thread-safe, lock-free.
class Histogram {
 public:
  // `upper_bounds` must be strictly increasing and finite; an implicit +Inf bucket is added.
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;         // Without +Inf.
    std::vector<uint64_t> cumulative_counts;  // One per bound, plus +Inf last.
    double sum = 0;
    uint64_t count = 0;  // Equals cumulative_counts.back().
  };
  Snapshot Read() const;

  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  const std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> bucket_counts_;  // Not cumulative; size bounds + 1.
  AtomicDouble sum_;
};

// Bucket bounds start, start*factor, ... (count of them). CHECKs start > 0, factor > 1, count >= 1.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Bucket bounds start, start+width, ... (count of them). CHECKs width > 0, count >= 1.
std::vector<double> LinearBuckets(double start, double width, int count);

}  // namespace ringmaster::metrics

#endif  // RINGMASTER_COMMON_METRICS_METRIC_H_
