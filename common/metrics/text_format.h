// Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), written by hand because
// prometheus-cpp is not packaged in Debian. Proven by promtool and a real Prometheus scrape
// (tests/prometheus_scrape_test.cc).
#ifndef RINGMASTER_COMMON_METRICS_TEXT_FORMAT_H_
#define RINGMASTER_COMMON_METRICS_TEXT_FORMAT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "common/metrics/registry.h"

namespace ringmaster::metrics {

// The Content-Type a /metrics response must carry.
inline constexpr absl::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

// Escapes a label value: backslash, double quote and newline become \\, \" and \n.
std::string EscapeLabelValue(absl::string_view value);
// Escapes HELP text: backslash and newline become \\ and \n.
std::string EscapeHelp(absl::string_view help);
// Formats a sample value: shortest text that parses back to the same double; +Inf, -Inf, NaN.
std::string FormatValue(double value);

// Appends one family (HELP, TYPE and every sample) to `out`.
void AppendFamily(const FamilyBase& family, std::string* out);

}  // namespace ringmaster::metrics

#endif  // RINGMASTER_COMMON_METRICS_TEXT_FORMAT_H_
