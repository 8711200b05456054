#include "common/metrics/registry.h"

#include "absl/strings/match.h"
#include "common/metrics/text_format.h"

namespace ringmaster::metrics {
namespace {

bool IsNameChar(char c, bool first, bool allow_colon) {
  bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (allow_colon && c == ':') return true;
  return first ? alpha : (alpha || (c >= '0' && c <= '9'));
}

void CheckShape(const std::string& name, const std::vector<std::string>& label_names,
                MetricType type) {
  RM_CHECK(IsValidMetricName(name)) << "invalid metric name \"" << name << "\"";
  for (const std::string& label : label_names) {
    RM_CHECK(IsValidLabelName(label)) << name << ": invalid label name \"" << label << "\"";
    RM_CHECK(!(type == MetricType::kHistogram && label == "le"))
        << name << ": \"le\" is reserved in histograms";
  }
}

}  // namespace

bool IsValidMetricName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, /*allow_colon=*/true)) return false;
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || absl::StartsWith(name, "__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, /*allow_colon=*/false)) return false;
  }
  return true;
}

FamilyBase* Registry::Find(const std::string& name, MetricType type,
                           const std::vector<std::string>& label_names) {
  auto it = families_.find(name);
  if (it == families_.end()) return nullptr;
  FamilyBase* family = it->second.get();
  RM_CHECK(family->type() == type && family->label_names() == label_names)
      << "metric \"" << name << "\" registered twice with different type or labels";
  return family;
}

CounterFamily& Registry::AddCounter(const std::string& name, const std::string& help,
                                    const std::vector<std::string>& label_names) {
  CheckShape(name, label_names, MetricType::kCounter);
  absl::MutexLock lock(&mu_);
  if (FamilyBase* f = Find(name, MetricType::kCounter, label_names)) {
    return *static_cast<CounterFamily*>(f);
  }
  auto family = std::make_unique<CounterFamily>(name, help, MetricType::kCounter, label_names);
  CounterFamily& ref = *family;
  families_.emplace(name, std::move(family));
  return ref;
}

GaugeFamily& Registry::AddGauge(const std::string& name, const std::string& help,
                                const std::vector<std::string>& label_names) {
  CheckShape(name, label_names, MetricType::kGauge);
  absl::MutexLock lock(&mu_);
  if (FamilyBase* f = Find(name, MetricType::kGauge, label_names)) {
    return *static_cast<GaugeFamily*>(f);
  }
  auto family = std::make_unique<GaugeFamily>(name, help, MetricType::kGauge, label_names);
  GaugeFamily& ref = *family;
  families_.emplace(name, std::move(family));
  return ref;
}

HistogramFamily& Registry::AddHistogram(const std::string& name, const std::string& help,
                                        const std::vector<std::string>& label_names,
                                        const std::vector<double>& upper_bounds) {
  CheckShape(name, label_names, MetricType::kHistogram);
  Histogram validate_bounds(upper_bounds);  // Aborts on unsorted or non-finite bounds.
  absl::MutexLock lock(&mu_);
  if (FamilyBase* f = Find(name, MetricType::kHistogram, label_names)) {
    auto* h = static_cast<HistogramFamily*>(f);
    RM_CHECK(h->upper_bounds() == upper_bounds)
        << "histogram \"" << name << "\" registered twice with different buckets";
    return *h;
  }
  auto family = std::make_unique<HistogramFamily>(name, help, label_names, upper_bounds);
  HistogramFamily& ref = *family;
  families_.emplace(name, std::move(family));
  return ref;
}

std::string Registry::RenderText() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) AppendFamily(*family, &out);
  return out;
}

}  // namespace ringmaster::metrics
