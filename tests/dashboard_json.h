// Grafana dashboard JSON (dashboards/*.json) for tests: every panel's PromQL, the template
// variables, their substitution, and the structural checks a dashboard must pass. Grafana cannot
// run here, so the dashboards are proven by these checks (//tests:monitoring_dashboards_test) and
// by running every query against a real Prometheus (//tests:monitoring_panels_test).
#ifndef RINGMASTER_TESTS_DASHBOARD_JSON_H_
#define RINGMASTER_TESTS_DASHBOARD_JSON_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"

namespace ringmaster::testing {

// One query of one panel, as written in the JSON.
struct PanelQuery {
  std::string dashboard;  // file name, e.g. "ringmaster-job.json"
  std::string panel;      // panel title
  std::string ref_id;     // "A", "B", ...
  std::string expr;       // PromQL with the dashboard's variables in it
  std::string Name() const { return dashboard + " / " + panel + " / " + ref_id; }
};

// A query template variable: `label_values(SELECTOR, LABEL)`.
struct QueryVariable {
  std::string name;
  std::string selector;  // e.g. ringmaster_step{job_id="$job_id"}
  std::string label;     // e.g. rank
};

struct Dashboard {
  std::string file;  // base name
  google::protobuf::Struct json;
  std::string title() const;
  std::vector<PanelQuery> Queries() const;
  // Names of all template variables (datasource included).
  std::vector<std::string> VariableNames() const;
  // The query variables; INVALID_ARGUMENT for one that is not label_values(SELECTOR, LABEL).
  absl::StatusOr<std::vector<QueryVariable>> QueryVariables() const;
};

// Parses one dashboard's JSON `text`; INVALID_ARGUMENT if it is not JSON.
absl::StatusOr<Dashboard> ParseDashboard(const std::string& file, const std::string& text);

// Loads every *.json file in `dir` (sorted by name). INVALID_ARGUMENT names a file that does not
// parse as JSON.
absl::StatusOr<std::vector<Dashboard>> LoadDashboards(const std::string& dir);

// Replaces Grafana variables ($name, ${name}, ${name:format}) in `expr` by `values` (keyed by
// name, including the builtins $__rate_interval, $__interval, $__range). INVALID_ARGUMENT names a
// variable with no value.
absl::StatusOr<std::string> Substitute(const std::string& expr,
                                       const std::map<std::string, std::string>& values);

// Structural problems of a dashboard, one line each (empty when it is sound): title, uid,
// schema version, the datasource variable, panel types, unique ids and titles, grid positions
// inside the 24-column grid without overlaps, every query panel on the `${datasource}` variable
// with uniquely named non-empty queries and a description, and every variable used defined.
std::vector<std::string> LintDashboard(const Dashboard& dashboard);

// Metric names (ringmaster_*, histogram suffixes _bucket/_sum/_count removed) and recording-rule
// names (level:metric[:operations]) mentioned in `text`, sorted and unique.
std::vector<std::string> MetricNamesIn(const std::string& text);

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_DASHBOARD_JSON_H_
