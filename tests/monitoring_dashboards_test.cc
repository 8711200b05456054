// The Grafana dashboards without Grafana (which cannot run here): every dashboards/*.json file
// is a sound dashboard (tests/dashboard_json.h's checks), has the panels and variables the
// dashboards issue asks for, and mentions only metrics and recording rules that exist in
// docs/metrics.md and deploy/prometheus. Whether every query returns data is
// tests/monitoring_panels_test's job.
#include <fstream>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/dashboard_json.h"

namespace ringmaster::testing {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Dashboard> Load() {
  auto dashboards = LoadDashboards("dashboards");
  EXPECT_TRUE(dashboards.ok()) << dashboards.status();
  return dashboards.ok() ? *dashboards : std::vector<Dashboard>{};
}

const Dashboard* Find(const std::vector<Dashboard>& all, const std::string& file) {
  for (const Dashboard& d : all) {
    if (d.file == file) return &d;
  }
  return nullptr;
}

std::set<std::string> PanelTitles(const Dashboard& d) {
  std::set<std::string> titles;
  for (const PanelQuery& q : d.Queries()) titles.insert(q.panel);
  return titles;
}

TEST(DashboardsTest, EveryDashboardIsSound) {
  const std::vector<Dashboard> all = Load();
  ASSERT_EQ(all.size(), 2u);
  for (const Dashboard& d : all) {
    EXPECT_THAT(LintDashboard(d), IsEmpty());
    EXPECT_FALSE(d.Queries().empty()) << d.file;
  }
}

TEST(DashboardsTest, ClusterOverviewHasAgentsJobsByStateAndRestarts) {
  const std::vector<Dashboard> all = Load();
  const Dashboard* d = Find(all, "ringmaster-cluster.json");
  ASSERT_NE(d, nullptr);
  EXPECT_THAT(d->VariableNames(), Contains("node"));
  const std::set<std::string> titles = PanelTitles(*d);
  for (const char* t : {"Agents connected", "Agent health by node", "Jobs by state",
                        "Restarts by job", "Stragglers and hangs (all jobs)", "Alerts"}) {
    EXPECT_THAT(titles, Contains(t));
  }
}

TEST(DashboardsTest, JobViewHasEveryPanelTheIssueAsksFor) {
  const std::vector<Dashboard> all = Load();
  const Dashboard* d = Find(all, "ringmaster-job.json");
  ASSERT_NE(d, nullptr);
  EXPECT_THAT(d->VariableNames(), Contains("job_id"));
  EXPECT_THAT(d->VariableNames(), Contains("node"));
  const std::set<std::string> titles = PanelTitles(*d);
  for (const char* t :
       {"Step time p50 / p99 across ranks", "Step time per rank", "Tokens per second", "MFU",
        "Loss and gradient norm", "Bus bandwidth by op and group", "Compute vs communication share",
        "Checkpoint duration", "Recovery phases (latest recovery)", "Goodput",
        "Stragglers and hangs"}) {
    EXPECT_THAT(titles, Contains(t));
  }
  // The per-rank step time is a heatmap with one row per rank.
  bool heatmap = false;
  for (const auto& panel : d->json.fields().at("panels").list_value().values()) {
    const auto& f = panel.struct_value().fields();
    if (f.at("title").string_value() == "Step time per rank") {
      heatmap = f.at("type").string_value() == "heatmap";
    }
  }
  EXPECT_TRUE(heatmap);
  // Per-rank panels follow the node variable.
  int with_node = 0;
  for (const PanelQuery& q : d->Queries()) {
    if (q.expr.find("node=~\"$node\"") != std::string::npos) ++with_node;
  }
  EXPECT_GE(with_node, 10);
}

TEST(DashboardsTest, EveryMetricAndRuleTheyUseIsDocumentedAndDefined) {
  const std::string docs = Read("docs/metrics.md");
  const std::string recording = Read("deploy/prometheus/recording_rules.yml");
  const std::string alerts = Read("deploy/prometheus/alert_rules.yml");
  ASSERT_FALSE(docs.empty());
  ASSERT_FALSE(recording.empty());
  const std::set<std::string> documented = [&] {
    auto v = MetricNamesIn(docs);
    return std::set<std::string>(v.begin(), v.end());
  }();
  std::string used;
  for (const Dashboard& d : Load()) {
    for (const PanelQuery& q : d.Queries()) used += q.expr + "\n";
  }
  used += recording + alerts;
  for (const std::string& name : MetricNamesIn(used)) {
    EXPECT_TRUE(documented.count(name)) << name << " is used but not in docs/metrics.md";
    if (name.find(':') != std::string::npos) {
      EXPECT_NE(recording.find("record: " + name + "\n"), std::string::npos)
          << name << " is not a recording rule in deploy/prometheus/recording_rules.yml";
    }
  }
}

TEST(DashboardsTest, GrafanaProvisioningLoadsTheDashboardsFromFiles) {
  const std::string provisioning = Read("dashboards/provisioning/dashboards.yaml");
  EXPECT_NE(provisioning.find("apiVersion: 1"), std::string::npos);
  EXPECT_NE(provisioning.find("type: file"), std::string::npos);
  EXPECT_NE(provisioning.find("path: "), std::string::npos);
}

// Guards the checks above: a dashboard with overlapping panels, a missing datasource, an
// undefined variable and a duplicate id must be reported.
TEST(DashboardsTest, LintReportsABrokenDashboard) {
  const std::string json = R"({
    "title": "Broken", "uid": "broken", "schemaVersion": 39, "id": null,
    "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
    "panels": [
      {"id": 1, "type": "timeseries", "title": "A", "description": "a",
       "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8},
       "datasource": {"type": "prometheus", "uid": "${datasource}"},
       "targets": [{"refId": "A", "expr": "up{job_id=\"$job_id\"}"}]},
      {"id": 1, "type": "timeseries", "title": "B", "description": "b",
       "gridPos": {"x": 6, "y": 4, "w": 12, "h": 8},
       "targets": [{"refId": "A", "expr": "up"}]}
    ]})";
  auto d = ParseDashboard("broken.json", json);
  ASSERT_TRUE(d.ok()) << d.status();
  const std::vector<std::string> problems = LintDashboard(*d);
  auto mentions = [&](const std::string& text) {
    for (const std::string& p : problems) {
      if (p.find(text) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(mentions("undefined variable $job_id"));
  EXPECT_TRUE(mentions("not unique"));
  EXPECT_TRUE(mentions("overlaps panel \"A\""));
  EXPECT_TRUE(mentions("panel \"B\" does not use the ${datasource} variable"));
}

TEST(DashboardsTest, VariablesAreSubstitutedInEveryGrafanaSyntax) {
  const std::map<std::string, std::string> values = {
      {"job_id", "gpt-1"}, {"node", "a|b"}, {"__rate_interval", "1m"}};
  auto got = Substitute("rate(x{job_id=\"$job_id\",node=~\"${node}\"}[$__rate_interval])", values);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "rate(x{job_id=\"gpt-1\",node=~\"a|b\"}[1m])");
  EXPECT_EQ(*Substitute("x{node=~\"${node:regex}\"}", values), "x{node=~\"a|b\"}");
  EXPECT_FALSE(Substitute("x{rank=~\"$rank\"}", values).ok());
}

TEST(DashboardsTest, MetricNamesAreFoundWithoutHistogramSuffixes) {
  EXPECT_EQ(MetricNamesIn("rate(ringmaster_step_seconds_bucket[1m]) / "
                          "job_id:ringmaster_step_seconds:p99_rate5m + ringmaster_loss - "
                          "job_id:ringmaster_job_checkpoint_age_seconds"),
            (std::vector<std::string>{"job_id:ringmaster_job_checkpoint_age_seconds",
                                      "job_id:ringmaster_step_seconds:p99_rate5m",
                                      "ringmaster_loss", "ringmaster_step_seconds"}));
}

}  // namespace
}  // namespace ringmaster::testing
