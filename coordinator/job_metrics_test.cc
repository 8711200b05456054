#include "coordinator/job_metrics.h"

#include <cmath>
#include <string>

#include "common/metrics/registry.h"
#include "common/testing/series_value.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::ringmaster::testing::SeriesValue;

class JobMetricsTest : public ::testing::Test {
 protected:
  double Value(const std::string& series) const {
    return SeriesValue(registry_.RenderText(), series);
  }
  bool Has(const std::string& series) const { return !std::isnan(Value(series)); }

  metrics::Registry registry_;
  JobMetrics metrics_{&registry_};
  JobSeries series_;
};

TEST_F(JobMetricsTest, WithoutARegistryEverythingIsANoOp) {
  JobMetrics none(nullptr);
  EXPECT_FALSE(none.enabled());
  JobSeries series;
  none.StartJob("j", true);
  none.SetHangSuspects("j", {1, 2}, &series);
  none.SetStraggler("j", 1, true, &series);
  none.SetFailed("j", absl::UnixEpoch(), absl::UnixEpoch() + absl::Hours(1), &series);
  none.ForgetFailed("j", &series);
  none.ForgetJob("j", &series);
  EXPECT_TRUE(series.hang_suspects.empty());
  EXPECT_TRUE(series.stragglers.empty());
  EXPECT_EQ(series.failed_until, absl::InfinitePast());
}

TEST_F(JobMetricsTest, AJobsCountersStartAtZeroAndEverySeriesGoesWithIt) {
  EXPECT_TRUE(metrics_.enabled());
  metrics_.StartJob("j", /*checkpoints=*/true);
  EXPECT_EQ(Value("ringmaster_job_restarts_total{job_id=\"j\"}"), 0);
  EXPECT_EQ(Value("ringmaster_job_checkpoint_failures_total{job_id=\"j\"}"), 0);
  metrics_.CountRestart("j");
  EXPECT_EQ(Value("ringmaster_job_restarts_total{job_id=\"j\"}"), 1);
  metrics_.SetStraggler("j", 3, true, &series_);
  metrics_.SetHangSuspects("j", {1, 2}, &series_);
  metrics_.SetHangSuspects("j", {2}, &series_);  // replaces
  EXPECT_FALSE(Has("ringmaster_hang_suspect{job_id=\"j\",rank=\"1\"}"));
  EXPECT_EQ(Value("ringmaster_hang_suspect{job_id=\"j\",rank=\"2\"}"), 1);
  RecoveryPhases phases;
  phases.total = 4.5;
  metrics_.SetRecovery("j", phases, &series_);
  EXPECT_EQ(Value("ringmaster_recovery_seconds{job_id=\"j\",phase=\"total\"}"), 4.5);
  metrics_.SetProgress("j", 0.5, 12, 1000);
  EXPECT_EQ(Value("ringmaster_job_step{job_id=\"j\"}"), 12);
  v1::LinkState link;
  link.set_group("dp0");
  link.set_rank(0);
  link.set_peer_rank(1);
  link.set_node("a");
  link.set_peer_node("b");
  link.set_bytes_per_second(1);
  link.set_baseline_bytes_per_second(4);
  metrics_.AddSlowLink("j", link, &series_);
  EXPECT_EQ(Value("ringmaster_slow_link{job_id=\"j\",group=\"dp0\",rank=\"0\",peer_rank=\"1\","
                  "node=\"a\",peer_node=\"b\"}"),
            0.25);

  metrics_.ForgetJob("j", &series_);
  const std::string page = registry_.RenderText();
  EXPECT_EQ(page.find("job_id=\"j\""), std::string::npos) << page;
  EXPECT_TRUE(series_.stragglers.empty());
  EXPECT_TRUE(series_.hang_suspects.empty());
  EXPECT_FALSE(series_.recovery);
  EXPECT_TRUE(series_.slow_links.empty());
}

TEST_F(JobMetricsTest, AFailureOutlivesTheJobUntilItIsForgotten) {
  const absl::Time failed = absl::FromUnixSeconds(1000);
  metrics_.SetFailed("j", failed, failed + absl::Hours(1), &series_);
  EXPECT_EQ(series_.failed_until, failed + absl::Hours(1));
  metrics_.ForgetJob("j", &series_);
  EXPECT_EQ(Value("ringmaster_job_failed_timestamp_seconds{job_id=\"j\"}"), 1000);
  metrics_.ForgetFailed("j", &series_);
  EXPECT_FALSE(Has("ringmaster_job_failed_timestamp_seconds{job_id=\"j\"}"));
  EXPECT_EQ(series_.failed_until, absl::InfinitePast());
}

TEST_F(JobMetricsTest, AHoldReplacesThePreviousJobsSeries) {
  metrics_.SetHold("", "a", 1, 3);
  EXPECT_EQ(Value("ringmaster_devices_held{job_id=\"a\",state=\"idle\"}"), 1);
  EXPECT_EQ(Value("ringmaster_devices_held{job_id=\"a\",state=\"busy\"}"), 3);
  metrics_.SetHold("a", "b", 2, 0);
  EXPECT_FALSE(Has("ringmaster_devices_held{job_id=\"a\",state=\"idle\"}"));
  EXPECT_EQ(Value("ringmaster_devices_held{job_id=\"b\",state=\"idle\"}"), 2);
  metrics_.SetHold("b", "", 0, 0);
  EXPECT_FALSE(Has("ringmaster_devices_held{job_id=\"b\",state=\"idle\"}"));
}

TEST_F(JobMetricsTest, JobsByStateHasEveryState) {
  JobMetrics::StateCounts counts{};
  counts[v1::JOB_STATE_RUNNING] = 2;
  metrics_.SetJobsByState(counts);
  EXPECT_EQ(Value("ringmaster_jobs{state=\"running\"}"), 2);
  EXPECT_EQ(Value("ringmaster_jobs{state=\"pending\"}"), 0);
  EXPECT_EQ(Value("ringmaster_jobs{state=\"cancelled\"}"), 0);
}

}  // namespace
}  // namespace ringmaster::coordinator
