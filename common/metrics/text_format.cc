#include "common/metrics/text_format.h"

#include <charconv>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/enum_name.h"

namespace ringmaster::metrics {
namespace {

std::string Escape(absl::string_view in, bool quote) {
  std::string out;
  out.reserve(in.size());
  for (char c : in) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

const char* TypeName(MetricType type) {
  static constexpr std::pair<MetricType, const char*> kNames[] = {
      {MetricType::kCounter, "counter"},
      {MetricType::kGauge, "gauge"},
      {MetricType::kHistogram, "histogram"}};
  return EnumName(kNames, type, "untyped");
}

// Appends `name{l1="v1",...,extra_name="extra_value"} value\n`.
void AppendSample(absl::string_view name, const std::vector<std::string>& label_names,
                  const std::vector<std::string>& label_values, absl::string_view extra_name,
                  absl::string_view extra_value, double value, std::string* out) {
  absl::StrAppend(out, name);
  bool any = !label_names.empty() || !extra_name.empty();
  if (any) {
    out->push_back('{');
    bool first = true;
    for (size_t i = 0; i < label_names.size(); ++i) {
      absl::StrAppend(out, first ? "" : ",", label_names[i], "=\"",
                      EscapeLabelValue(label_values[i]), "\"");
      first = false;
    }
    if (!extra_name.empty()) {
      absl::StrAppend(out, first ? "" : ",", extra_name, "=\"", extra_value, "\"");
    }
    out->push_back('}');
  }
  absl::StrAppend(out, " ", FormatValue(value), "\n");
}

}  // namespace

std::string EscapeLabelValue(absl::string_view value) { return Escape(value, true); }

std::string EscapeHelp(absl::string_view help) { return Escape(help, false); }

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value);  // Shortest round-trip form.
  return std::string(buf, result.ptr);
}

void AppendFamily(const FamilyBase& family, std::string* out) {
  const std::string& name = family.name();
  absl::StrAppend(out, "# HELP ", name, " ", EscapeHelp(family.help()), "\n");
  absl::StrAppend(out, "# TYPE ", name, " ", TypeName(family.type()), "\n");
  for (const SampleSet& s : family.Collect()) {
    if (family.type() != MetricType::kHistogram) {
      AppendSample(name, family.label_names(), s.label_values, "", "", s.value, out);
      continue;
    }
    const Histogram::Snapshot& h = s.histogram;
    std::string bucket = name + "_bucket";
    for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
      AppendSample(bucket, family.label_names(), s.label_values, "le",
                   FormatValue(h.upper_bounds[i]), static_cast<double>(h.cumulative_counts[i]),
                   out);
    }
    AppendSample(bucket, family.label_names(), s.label_values, "le", "+Inf",
                 static_cast<double>(h.count), out);
    AppendSample(name + "_sum", family.label_names(), s.label_values, "", "", h.sum, out);
    AppendSample(name + "_count", family.label_names(), s.label_values, "", "",
                 static_cast<double>(h.count), out);
  }
}

}  // namespace ringmaster::metrics
