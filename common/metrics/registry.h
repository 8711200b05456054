// Metric families with labels, and the registry that renders them.
//
//   Registry registry;
//   auto& steps = registry.AddCounter("ringmaster_steps_total", "Steps completed.", {"job",
//   "rank"}); std::shared_ptr<Counter> c = steps.WithLabels({"gpt-1", "0"});  // once, off the hot
//   path c->Increment();                                                // hot path: lock-free
//
// Locking: the registry's lock guards only the list of families (taken when adding a family and
// when rendering); each family's lock guards only its map of label values to children (taken by
// WithLabels/Remove and when rendering). Updating a child takes no lock at all.
//
// Names and label names are programmer constants: an invalid or conflicting one is a programmer
// error and aborts (RM_CHECK). Label values are arbitrary UTF-8 and are escaped on output.
#ifndef RINGMASTER_COMMON_METRICS_REGISTRY_H_
#define RINGMASTER_COMMON_METRICS_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/metrics/metric.h"

namespace ringmaster::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// One labelled child's current value, as read for exposition.
struct SampleSet {
  std::vector<std::string> label_values;
  double value = 0;               // Counter and gauge.
  Histogram::Snapshot histogram;  // Histogram.
};

// Type-erased view of a family, used by exposition.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type,
             std::vector<std::string> label_names)
      : name_(std::move(name)),
        help_(std::move(help)),
        type_(type),
        label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Current values of every child, sorted by label values. Thread-safe.
  virtual std::vector<SampleSet> Collect() const = 0;

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
};

// A family of metrics of type T that share a name and label names. Thread-safe.
template <typename T>
class Family : public FamilyBase {
 public:
  using FamilyBase::FamilyBase;

  // Returns the child for these label values (one per label name, in order), creating it on first
  // use. The pointer stays valid for as long as the caller holds it, even after Remove().
  // Cache it: this call takes the family's lock.
  std::shared_ptr<T> WithLabels(const std::vector<std::string>& label_values) {
    RM_CHECK(label_values.size() == label_names().size())
        << name() << ": expected " << label_names().size() << " label values, got "
        << label_values.size();
    absl::MutexLock lock(&mu_);
    auto it = children_.find(label_values);
    if (it == children_.end()) {
      it = children_.emplace(label_values, NewChild()).first;
    }
    return it->second;
  }

  // Stops exporting the child with these label values (bounding cardinality when a job ends).
  // Holders of its pointer may keep updating it; the updates are no longer exported.
  void Remove(const std::vector<std::string>& label_values) {
    absl::MutexLock lock(&mu_);
    children_.erase(label_values);
  }

  std::vector<SampleSet> Collect() const override {
    std::vector<SampleSet> out;
    absl::MutexLock lock(&mu_);
    out.reserve(children_.size());
    for (const auto& [labels, child] : children_) {
      SampleSet s;
      s.label_values = labels;
      Fill(*child, &s);
      out.push_back(std::move(s));
    }
    return out;
  }

 protected:
  // Histogram families override this to pass their bucket bounds.
  virtual std::shared_ptr<T> NewChild() const {
    if constexpr (std::is_default_constructible_v<T>) {
      return std::make_shared<T>();
    } else {
      RM_LOG(FATAL) << name() << ": family must override NewChild()";
      return nullptr;
    }
  }

 private:
  static void Fill(const Counter& c, SampleSet* s) { s->value = c.Value(); }
  static void Fill(const Gauge& g, SampleSet* s) { s->value = g.Value(); }
  static void Fill(const Histogram& h, SampleSet* s) { s->histogram = h.Read(); }

  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::shared_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;

class HistogramFamily : public Family<Histogram> {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> upper_bounds)
      : Family<Histogram>(std::move(name), std::move(help), MetricType::kHistogram,
                          std::move(label_names)),
        upper_bounds_(std::move(upper_bounds)) {}
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 protected:
  std::shared_ptr<Histogram> NewChild() const override {
    return std::make_shared<Histogram>(upper_bounds_);
  }

 private:
  const std::vector<double> upper_bounds_;
};

// Owns metric families and renders them. Thread-safe. Families live as long as the registry.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Adds a family, or returns the existing one if a family of the same name, type, label names
  // (and bounds) exists. A name reused with a different shape aborts: it is a programmer error.
  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            const std::vector<std::string>& label_names = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        const std::vector<std::string>& label_names = {});
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                const std::vector<std::string>& label_names,
                                const std::vector<double>& upper_bounds);

  // Renders every family in the Prometheus text exposition format 0.0.4, families sorted by name.
  std::string RenderText() const;

 private:
  FamilyBase* Find(const std::string& name, MetricType type,
                   const std::vector<std::string>& label_names) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
};

// True if `name` is a valid metric name: [a-zA-Z_:][a-zA-Z0-9_:]*.
bool IsValidMetricName(absl::string_view name);
// True if `name` is a valid label name: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__".
bool IsValidLabelName(absl::string_view name);

}  // namespace ringmaster::metrics

#endif  // RINGMASTER_COMMON_METRICS_REGISTRY_H_
