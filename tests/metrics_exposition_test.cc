// Metric labels name the training job `job_id`: `job` is the label Prometheus gives the scrape
// target, and a scraped `job` label would be renamed `exported_job`.
//
// Proves the hand-written Prometheus exposition against the real tools:
//  - a live /metrics page (library page with every metric type and awkward label values, and the
//    real coordinator binary's page) passes `promtool check metrics` with no lint output;
//  - a real Prometheus scrapes a test server on loopback and returns the values through
//    /api/v1/query, including escaped label values and histogram quantiles.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics/registry.h"
#include "common/testing/prometheus_server.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tests/promtool_check.h"

namespace ringmaster {
namespace {

using testing::PrometheusServer;
using testing::RunCommand;

constexpr char kAwkwardValue[] = "a \"quoted\" \\ back\nslash";

void FillRegistry(metrics::Registry* registry) {
  auto& steps = registry->AddCounter("ringmaster_test_steps_total", "Steps \"done\" \\ so far.",
                                     {"job_id", "rank"});
  steps.WithLabels({"gpt", "0"})->Increment(41);
  steps.WithLabels({"gpt", "0"})->Increment();
  steps.WithLabels({kAwkwardValue, "1"})->Increment(7);
  registry->AddGauge("ringmaster_test_loss", "Latest loss.", {"job_id"})
      .WithLabels({"gpt"})
      ->Set(2.5);
  auto& step_seconds = registry->AddHistogram("ringmaster_test_step_seconds", "Step time.",
                                              {"job_id"}, metrics::ExponentialBuckets(0.01, 2, 10));
  auto h = step_seconds.WithLabels({"gpt"});
  for (int i = 0; i < 100; ++i) h->Observe(0.05);
}

std::string Scrape(int port) {
  auto got = HttpGet("127.0.0.1", port, "/metrics");
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok()) return "";
  EXPECT_EQ(got->status, 200);
  return got->body;
}

TEST(PromtoolTest, LibraryPagePassesCheckMetrics) {
  metrics::Registry registry;
  FillRegistry(&registry);
  auto server = StartMetricsServer("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  testing::ExpectPromtoolClean(Scrape((*server)->port()));
}

TEST(PromtoolTest, PromtoolRejectsABrokenPage) {
  // Guards the test above: promtool must actually be checking what we feed it.
  auto result =
      RunCommand({"promtool", "check", "metrics"}, "# TYPE x counter\nx{a=\"unterminated} 1\n");
  ASSERT_TRUE(result.ok());
  EXPECT_NE(result->exit_code, 0);
}

TEST(PromtoolTest, CoordinatorPagePassesCheckMetrics) {
  auto coordinator = testing::StartCoordinator({"--insecure"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::string page = Scrape(coordinator->metrics_port);
  EXPECT_NE(page.find("ringmaster_build_info{component=\"coordinator\""), std::string::npos);
  testing::ExpectPromtoolClean(page);
}

TEST(PrometheusScrapeTest, RealPrometheusReadsValuesBack) {
  metrics::Registry registry;
  FillRegistry(&registry);
  auto server = StartMetricsServer("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  auto prometheus = PrometheusServer::Start({absl::StrCat("127.0.0.1:", (*server)->port())});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  const PrometheusServer& prom = **prometheus;

  auto up = prom.WaitForSamples("up{job=\"ringmaster\"} == 1", absl::Seconds(60));
  ASSERT_TRUE(up.ok()) << up.status() << "\n" << prom.Log();

  auto steps =
      prom.WaitForSamples("ringmaster_test_steps_total{job_id=\"gpt\"}", absl::Seconds(30));
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].value, 42);
  EXPECT_EQ((*steps)[0].labels.at("rank"), "0");

  // The awkward label value must arrive byte for byte.
  auto awkward = prom.Query("ringmaster_test_steps_total{rank=\"1\"}");
  ASSERT_TRUE(awkward.ok()) << awkward.status();
  ASSERT_EQ(awkward->size(), 1u);
  EXPECT_EQ((*awkward)[0].labels.at("job_id"), kAwkwardValue);
  EXPECT_EQ((*awkward)[0].value, 7);

  auto loss = prom.Query("ringmaster_test_loss");
  ASSERT_TRUE(loss.ok());
  ASSERT_EQ(loss->size(), 1u);
  EXPECT_EQ((*loss)[0].value, 2.5);

  // Every observation is 0.05, inside the (0.04, 0.08] bucket.
  auto count = prom.Query("ringmaster_test_step_seconds_count");
  ASSERT_TRUE(count.ok());
  ASSERT_EQ(count->size(), 1u);
  EXPECT_EQ((*count)[0].value, 100);
  auto p50 = prom.Query("histogram_quantile(0.5, ringmaster_test_step_seconds_bucket)");
  ASSERT_TRUE(p50.ok()) << p50.status();
  ASSERT_EQ(p50->size(), 1u);
  EXPECT_GT((*p50)[0].value, 0.04);
  EXPECT_LE((*p50)[0].value, 0.08);

  // A malformed expression is reported as such, not as "no data".
  EXPECT_EQ(prom.Query("sum(").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmaster
