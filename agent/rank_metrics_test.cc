#include "agent/rank_metrics.h"

#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

v1::WorkerIdentity Worker(const std::string& job_id, int64_t generation, int rank) {
  v1::WorkerIdentity w;
  w.set_job_id(job_id);
  w.set_generation(generation);
  w.set_rank(rank);
  return w;
}

// A step of 0.5 s with 4096 tokens, 0.375 s compute and 0.125 s in one all_reduce on dp0.
v1::ReportStepRequest Step(const std::string& job_id, int64_t generation, int rank, int64_t step) {
  v1::ReportStepRequest r;
  *r.mutable_worker() = Worker(job_id, generation, rank);
  r.set_step(step);
  r.set_loss(2.5);
  r.set_tokens(4096);
  r.set_step_seconds(0.5);
  r.set_compute_seconds(0.375);
  r.set_comm_seconds(0.125);
  v1::CollectiveStat* c = r.add_collectives();
  c->set_op("all_reduce");
  c->set_group("dp0");
  c->set_count(2);
  c->set_bytes(1000);
  c->set_seconds(0.125);
  c->set_algbw_bytes_per_second(8000);
  c->set_busbw_bytes_per_second(12000);
  (*r.mutable_collective_entered())["dp0"] = 2 * step;
  (*r.mutable_collective_completed())["dp0"] = 2 * step;
  return r;
}

v1::ReportPhaseRequest Phase(const std::string& job_id, int64_t generation, int rank,
                             v1::WorkerPhase phase, int64_t checkpoint_step = 0) {
  v1::ReportPhaseRequest r;
  *r.mutable_worker() = Worker(job_id, generation, rank);
  r.set_phase(phase);
  r.set_checkpoint_step(checkpoint_step);
  return r;
}

// The page's sample lines (without # HELP / # TYPE).
std::vector<std::string> Samples(const metrics::Registry& registry) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(registry.RenderText(), '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "#")) out.emplace_back(line);
  }
  return out;
}

class RankMetricsTest : public ::testing::Test {
 protected:
  metrics::Registry registry_;
  FakeClock clock_;
  RankMetrics metrics_{&registry_, &clock_, absl::Seconds(1)};
};

TEST_F(RankMetricsTest, RendersAStepReport) {
  metrics_.OnStep(Step("gpt-1", 1, 3, 7));
  const std::string l = "{job_id=\"gpt-1\",rank=\"3\"";
  const std::string c = l + ",op=\"all_reduce\",group=\"dp0\"}";
  // Buckets: 1 ms doubling up to 262.144 s; the 0.5 s step counts from le="0.512" on.
  const std::string expected = absl::StrCat(
      "# HELP ringmaster_bubble_ratio Pipeline parallelism: measured idle share of the rank's last "
      "step (the formula is (p-1)/(m+p-1)).\n"
      "# TYPE ringmaster_bubble_ratio gauge\n"
      "# HELP ringmaster_checkpoint_seconds Seconds the newest committed checkpoint took, from "
      "snapshot to commit.\n"
      "# TYPE ringmaster_checkpoint_seconds gauge\n"
      "# HELP ringmaster_checkpoint_step Step of the newest checkpoint committed by the job.\n"
      "# TYPE ringmaster_checkpoint_step gauge\n"
      "# HELP ringmaster_collective_algbw_bytes_per_second Algorithm bandwidth of the collective "
      "in the last step that ran it: bytes / seconds (nccl-tests' algbw).\n"
      "# TYPE ringmaster_collective_algbw_bytes_per_second gauge\n"
      "ringmaster_collective_algbw_bytes_per_second",
      c, " 8000\n",
      "# HELP ringmaster_collective_busbw_bytes_per_second Bus bandwidth of the collective in the "
      "last step that ran it: algbw times 2(n-1)/n for all_reduce, (n-1)/n for all_gather, "
      "reduce_scatter, gather, scatter and all_to_all, 0 for barrier, 1 otherwise (nccl-tests' "
      "busbw).\n"
      "# TYPE ringmaster_collective_busbw_bytes_per_second gauge\n"
      "ringmaster_collective_busbw_bytes_per_second",
      c, " 12000\n",
      "# HELP ringmaster_collective_seconds_total Seconds the rank spent in the collective.\n"
      "# TYPE ringmaster_collective_seconds_total counter\n"
      "ringmaster_collective_seconds_total",
      c, " 0.125\n",
      "# HELP ringmaster_collective_sequence Sequence number of the last collective the rank "
      "entered "
      "(kind=entered) or completed (kind=completed) on the communicator; a rank whose entered "
      "number lags its group's is the one the others wait for.\n"
      "# TYPE ringmaster_collective_sequence gauge\n"
      "ringmaster_collective_sequence",
      l, ",group=\"dp0\",kind=\"completed\"} 14\n", "ringmaster_collective_sequence", l,
      ",group=\"dp0\",kind=\"entered\"} 14\n",
      "# HELP ringmaster_communication_seconds Seconds of the rank's last step spent waiting in "
      "collectives.\n"
      "# TYPE ringmaster_communication_seconds gauge\n"
      "ringmaster_communication_seconds",
      l, "} 0.125\n",
      "# HELP ringmaster_compute_seconds Seconds of the rank's last step spent computing (time "
      "blocked in collectives on its training thread left out).\n"
      "# TYPE ringmaster_compute_seconds gauge\n"
      "ringmaster_compute_seconds",
      l, "} 0.375\n",
      "# HELP ringmaster_grad_norm Global gradient norm of the rank's last step, before "
      "clipping (a rise precedes a divergence).\n"
      "# TYPE ringmaster_grad_norm gauge\n"
      "# HELP ringmaster_input_seconds Seconds of the rank's last step spent waiting for its next "
      "batch (a PyTorch DataLoader's, under the Python watch): part of its compute seconds.\n"
      "# TYPE ringmaster_input_seconds gauge\n"
      "ringmaster_input_seconds",
      l, "} 0\n",
      "# HELP ringmaster_last_report_age_seconds Seconds since the rank's last report of any kind, "
      "as of the agent's last refresh.\n"
      "# TYPE ringmaster_last_report_age_seconds gauge\n"
      "ringmaster_last_report_age_seconds",
      l, "} 0\n",
      "# HELP ringmaster_loss Training loss of the rank's last completed step.\n"
      "# TYPE ringmaster_loss gauge\n"
      "ringmaster_loss",
      l, "} 2.5\n",
      "# HELP ringmaster_mfu Model FLOPs utilisation of the rank's last step (llm.c's 6N + 6LCT "
      "FLOPs per token over the device's peak), 0 to 1.\n"
      "# TYPE ringmaster_mfu gauge\n"
      "ringmaster_mfu",
      l, "} 0\n",
      "# HELP ringmaster_stage_compute_seconds Pipeline parallelism: seconds the rank's stage "
      "computed in its last step.\n"
      "# TYPE ringmaster_stage_compute_seconds gauge\n"
      "# HELP ringmaster_state_bytes Bytes of parameters, gradients and optimizer state the rank "
      "holds.\n"
      "# TYPE ringmaster_state_bytes gauge\n"
      "ringmaster_state_bytes",
      l, "} 0\n",
      "# HELP ringmaster_step Last completed training step of the rank.\n"
      "# TYPE ringmaster_step gauge\n"
      "ringmaster_step",
      l, "} 7\n",
      "# HELP ringmaster_step_seconds Wall-clock seconds of each training step of the rank.\n"
      "# TYPE ringmaster_step_seconds histogram\n",
      "ringmaster_step_seconds_bucket", l, ",le=\"0.001\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.002\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.004\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.008\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.016\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.032\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.064\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.128\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.256\"} 0\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"0.512\"} 1\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"1.024\"} 1\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"2.048\"} 1\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"4.096\"} 1\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"8.192\"} 1\n",    //
      "ringmaster_step_seconds_bucket", l, ",le=\"16.384\"} 1\n",   //
      "ringmaster_step_seconds_bucket", l, ",le=\"32.768\"} 1\n",   //
      "ringmaster_step_seconds_bucket", l, ",le=\"65.536\"} 1\n",   //
      "ringmaster_step_seconds_bucket", l, ",le=\"131.072\"} 1\n",  //
      "ringmaster_step_seconds_bucket", l, ",le=\"262.144\"} 1\n",  //
      "ringmaster_step_seconds_bucket", l, ",le=\"+Inf\"} 1\n",     //
      "ringmaster_step_seconds_sum", l, "} 0.5\n",                  //
      "ringmaster_step_seconds_count", l, "} 1\n",
      "# HELP ringmaster_tokens_per_second Tokens the rank processed per second in its last step "
      "(tokens / step seconds).\n"
      "# TYPE ringmaster_tokens_per_second gauge\n"
      "ringmaster_tokens_per_second",
      l, "} 8192\n",
      "# HELP ringmaster_worker_phase 1 for the phase the rank last reported (starting, init, "
      "step, checkpoint, eval); one series per rank.\n"
      "# TYPE ringmaster_worker_phase gauge\n"
      "ringmaster_worker_phase",
      l, ",phase=\"step\"} 1\n");
  EXPECT_EQ(registry_.RenderText(), expected);
}

TEST_F(RankMetricsTest, RepeatedStepIsRecordedOnce) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 7));
  metrics_.OnStep(Step("gpt-1", 1, 0, 7));  // A retry.
  metrics_.OnStep(Step("gpt-1", 1, 0, 6));  // Late.
  const std::string l = "{job_id=\"gpt-1\",rank=\"0\"";
  EXPECT_THAT(Samples(registry_),
              Contains(absl::StrCat("ringmaster_step_seconds_count", l, "} 1")));
  EXPECT_THAT(Samples(registry_), Contains(absl::StrCat("ringmaster_step", l, "} 7")));
  EXPECT_THAT(Samples(registry_),
              Contains(absl::StrCat("ringmaster_collective_seconds_total", l,
                                    ",op=\"all_reduce\",group=\"dp0\"} 0.125")));
}

TEST_F(RankMetricsTest, CollectiveSecondsAccumulateAndBandwidthsAreTheLastStep) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  v1::ReportStepRequest second = Step("gpt-1", 1, 0, 2);
  second.mutable_collectives(0)->set_seconds(0.25);
  second.mutable_collectives(0)->set_algbw_bytes_per_second(4000);
  second.mutable_collectives(0)->set_busbw_bytes_per_second(6000);
  v1::CollectiveStat* tp = second.add_collectives();
  tp->set_op("all_gather");
  tp->set_group("tp1");
  tp->set_seconds(0.5);
  tp->set_algbw_bytes_per_second(100);
  tp->set_busbw_bytes_per_second(50);
  metrics_.OnStep(second);
  const std::string dp = "{job_id=\"gpt-1\",rank=\"0\",op=\"all_reduce\",group=\"dp0\"}";
  const std::string tp1 = "{job_id=\"gpt-1\",rank=\"0\",op=\"all_gather\",group=\"tp1\"}";
  std::vector<std::string> samples = Samples(registry_);
  EXPECT_THAT(samples, Contains("ringmaster_collective_seconds_total" + dp + " 0.375"));
  EXPECT_THAT(samples, Contains("ringmaster_collective_algbw_bytes_per_second" + dp + " 4000"));
  EXPECT_THAT(samples, Contains("ringmaster_collective_busbw_bytes_per_second" + dp + " 6000"));
  EXPECT_THAT(samples, Contains("ringmaster_collective_seconds_total" + tp1 + " 0.5"));
  EXPECT_THAT(samples, Contains("ringmaster_collective_algbw_bytes_per_second" + tp1 + " 100"));
  EXPECT_THAT(samples, Contains("ringmaster_collective_busbw_bytes_per_second" + tp1 + " 50"));
}

TEST_F(RankMetricsTest, StepWithoutDurationHasNoRateAndNoObservation) {
  v1::ReportStepRequest step = Step("gpt-1", 1, 0, 1);
  step.set_step_seconds(0);
  metrics_.OnStep(step);
  const std::string l = "{job_id=\"gpt-1\",rank=\"0\"}";
  EXPECT_THAT(Samples(registry_), Contains("ringmaster_tokens_per_second" + l + " 0"));
  EXPECT_THAT(Samples(registry_), Contains("ringmaster_step_seconds_count" + l + " 0"));
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].tokens_per_second(), 0);
}

TEST_F(RankMetricsTest, RankThatHasNotSteppedShowsOnlyItsReportAgeAndPhase) {
  metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_INIT));
  EXPECT_THAT(Samples(registry_),
              UnorderedElementsAre(
                  "ringmaster_last_report_age_seconds{job_id=\"gpt-1\",rank=\"0\"} 0",
                  "ringmaster_worker_phase{job_id=\"gpt-1\",rank=\"0\",phase=\"init\"} 1"));
}

// One phase series per rank: the last phase reported (a step report means "step"); gone with
// the job's other series.
TEST_F(RankMetricsTest, WorkerPhaseFollowsTheReportsWithOneSeriesPerRank) {
  const std::string series = "ringmaster_worker_phase{job_id=\"gpt-1\",rank=\"0\",phase=";
  metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_INIT));
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_CHECKPOINT));
  std::vector<std::string> phases;
  for (const std::string& s : Samples(registry_)) {
    if (s.rfind("ringmaster_worker_phase", 0) == 0) phases.push_back(s);
  }
  EXPECT_THAT(phases, ElementsAre(series + "\"checkpoint\"} 1"));
  metrics_.OnStep(Step("gpt-1", 1, 0, 2));
  EXPECT_THAT(Samples(registry_), Contains(series + "\"step\"} 1"));
  EXPECT_THAT(Samples(registry_), Not(Contains(series + "\"checkpoint\"} 1")));
  metrics_.ForgetJob("gpt-1", 1);
  for (const std::string& s : Samples(registry_)) {
    EXPECT_NE(s.rfind("ringmaster_worker_phase", 0), 0u) << s;
  }
}

TEST_F(RankMetricsTest, SummaryCarriesTheLatestReport) {
  metrics_.OnPhase(Phase("gpt-1", 4, 2, v1::WORKER_PHASE_INIT));
  metrics_.OnStep(Step("gpt-1", 4, 2, 1));
  v1::ReportStepRequest step = Step("gpt-1", 4, 2, 2);
  step.set_loss(1.25);
  step.set_tokens(1000);
  step.set_step_seconds(0.25);
  step.set_compute_seconds(0.2);
  step.set_comm_seconds(0.05);
  (*step.mutable_collective_entered())["tp0"] = 9;
  (*step.mutable_collective_completed())["tp0"] = 8;
  metrics_.OnStep(step);
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  const v1::StepSummary& s = summaries[0];
  EXPECT_EQ(s.job().job_id(), "gpt-1");
  EXPECT_EQ(s.job().generation(), 4);
  EXPECT_EQ(s.rank(), 2);
  EXPECT_EQ(s.step(), 2);
  EXPECT_EQ(s.loss(), 1.25);
  EXPECT_EQ(s.step_seconds(), 0.25);
  EXPECT_EQ(s.compute_seconds(), 0.2);
  EXPECT_EQ(s.comm_seconds(), 0.05);
  EXPECT_EQ(s.tokens_per_second(), 4000);
  EXPECT_THAT(s.collective_entered(), UnorderedElementsAre(Pair("dp0", 4), Pair("tp0", 9)));
  EXPECT_THAT(s.collective_completed(), UnorderedElementsAre(Pair("dp0", 4), Pair("tp0", 8)));
  EXPECT_EQ(s.phase(), v1::WORKER_PHASE_STEP);
  EXPECT_EQ(s.checkpoint_step(), -1);
}

// What `ringctl top` shows of a rank: its step-time percentiles over its last 100 steps (this
// generation's only), its MFU and its collectives' busbw weighted by their seconds.
TEST_F(RankMetricsTest, SummaryCarriesStepTimePercentilesMfuAndBusbw) {
  for (int step = 1; step <= 150; ++step) {
    v1::ReportStepRequest r = Step("gpt-1", 1, 0, step);
    // Steps 51..150 (the window) take 0.01 s .. 1.00 s; the first 50 take 9 s (out of it).
    r.set_step_seconds(step <= 50 ? 9 : 0.01 * (step - 50));
    r.set_mfu(0.25);
    v1::CollectiveStat* c = r.add_collectives();  // 0.375 s at 4000 B/s besides 0.125 s at 12000
    c->set_op("all_gather");
    c->set_group("tp0");
    c->set_seconds(0.375);
    c->set_busbw_bytes_per_second(4000);
    metrics_.OnStep(r);
  }
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_DOUBLE_EQ(summaries[0].step_seconds_p50(), 0.50);
  EXPECT_DOUBLE_EQ(summaries[0].step_seconds_p99(), 0.99);
  EXPECT_EQ(summaries[0].mfu(), 0.25);
  EXPECT_DOUBLE_EQ(summaries[0].busbw_bytes_per_second(), 6000);
  // A relaunch starts its window over.
  clock_.Advance(absl::Seconds(1));
  v1::ReportStepRequest next = Step("gpt-1", 2, 0, 151);
  next.set_step_seconds(2);
  metrics_.OnStep(next);
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].step_seconds_p50(), 2);
  EXPECT_EQ(summaries[0].step_seconds_p99(), 2);
}

TEST_F(RankMetricsTest, SummaryCarriesPhaseAndNewestCheckpoint) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 50));
  metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_CHECKPOINT));
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].phase(), v1::WORKER_PHASE_CHECKPOINT);
  EXPECT_EQ(summaries[0].checkpoint_step(), -1);
  EXPECT_EQ(summaries[0].step(), 50);

  clock_.Advance(absl::Seconds(1));
  metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, /*checkpoint_step=*/50));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].phase(), v1::WORKER_PHASE_STEP);
  EXPECT_EQ(summaries[0].checkpoint_step(), 50);

  // Phase reports that commit nothing keep the newest checkpoint.
  clock_.Advance(absl::Seconds(1));
  metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_EVAL));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].phase(), v1::WORKER_PHASE_EVAL);
  EXPECT_EQ(summaries[0].checkpoint_step(), 50);
}

TEST_F(RankMetricsTest, AtMostOneSummaryPerRankPerInterval) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].step(), 1);

  metrics_.OnStep(Step("gpt-1", 1, 0, 2));
  metrics_.OnStep(Step("gpt-1", 1, 0, 3));
  EXPECT_THAT(metrics_.TakeSummaries(), IsEmpty());
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_THAT(metrics_.TakeSummaries(), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].step(), 3);  // The latest, not one per step.

  // Nothing new: nothing to send, however long it has been.
  clock_.Advance(absl::Seconds(10));
  EXPECT_THAT(metrics_.TakeSummaries(), IsEmpty());
  // A report after a quiet interval goes out at once.
  metrics_.OnStep(Step("gpt-1", 1, 0, 4));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].step(), 4);
}

TEST_F(RankMetricsTest, FirstStepOfARelaunchedProcessIsDueAtOnce) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 30));
  ASSERT_EQ(metrics_.TakeSummaries().size(), 1u);
  // The relaunch reports its first step well within the interval of the last summary.
  clock_.Advance(absl::Milliseconds(100));
  v1::ReportStepRequest first = Step("gpt-1", 2, 0, 21);
  first.set_process_start_unix_nanos(1000);
  metrics_.OnStep(first);
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].job().generation(), 2);
  EXPECT_EQ(summaries[0].process_start_unix_nanos(), 1000);
  // Later steps wait for the interval again.
  metrics_.OnStep(Step("gpt-1", 2, 0, 22));
  EXPECT_THAT(metrics_.TakeSummaries(), IsEmpty());
}

TEST_F(RankMetricsTest, PendingSummaryIsTakenWhateverItsAge) {
  EXPECT_FALSE(metrics_.TakePendingSummary("gpt-1", 0).has_value());  // never reported
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  ASSERT_EQ(metrics_.TakeSummaries().size(), 1u);
  EXPECT_FALSE(metrics_.TakePendingSummary("gpt-1", 0).has_value());  // nothing new
  metrics_.OnStep(Step("gpt-1", 1, 0, 2));
  EXPECT_THAT(metrics_.TakeSummaries(), IsEmpty());  // within the interval
  std::optional<v1::StepSummary> last = metrics_.TakePendingSummary("gpt-1", 0);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->step(), 2);
  clock_.Advance(absl::Seconds(5));
  EXPECT_THAT(metrics_.TakeSummaries(), IsEmpty());  // taken once
}

TEST_F(RankMetricsTest, MultipleRanksAndJobsHaveTheirOwnSeriesAndSummaries) {
  metrics_.OnStep(Step("a", 1, 0, 10));
  metrics_.OnStep(Step("a", 1, 1, 11));
  metrics_.OnStep(Step("b", 2, 0, 20));
  std::vector<std::string> samples = Samples(registry_);
  EXPECT_THAT(samples, Contains("ringmaster_step{job_id=\"a\",rank=\"0\"} 10"));
  EXPECT_THAT(samples, Contains("ringmaster_step{job_id=\"a\",rank=\"1\"} 11"));
  EXPECT_THAT(samples, Contains("ringmaster_step{job_id=\"b\",rank=\"0\"} 20"));
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 3u);
  std::vector<std::string> got;
  for (const v1::StepSummary& s : summaries) {
    got.push_back(
        absl::StrCat(s.job().job_id(), "/", s.job().generation(), "/", s.rank(), "@", s.step()));
  }
  EXPECT_THAT(got, UnorderedElementsAre("a/1/0@10", "a/1/1@11", "b/2/0@20"));

  // Rate limits are per rank: a rank that has not sent one within the interval still may.
  metrics_.OnStep(Step("a", 1, 0, 12));
  metrics_.OnStep(Step("a", 1, 2, 12));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].rank(), 2);
}

TEST_F(RankMetricsTest, LastReportAge) {
  EXPECT_EQ(metrics_.LastReportAgeSeconds("gpt-1", 0), -1);
  metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_INIT));
  EXPECT_EQ(metrics_.LastReportAgeSeconds("gpt-1", 0), 0);
  clock_.Advance(absl::Milliseconds(2500));
  EXPECT_EQ(metrics_.LastReportAgeSeconds("gpt-1", 0), 2.5);
  EXPECT_EQ(metrics_.LastReportAgeSeconds("gpt-1", 1), -1);
  const std::string age = "ringmaster_last_report_age_seconds{job_id=\"gpt-1\",rank=\"0\"}";
  EXPECT_THAT(Samples(registry_), Contains(age + " 0"));  // Until Refresh().
  metrics_.Refresh();
  EXPECT_THAT(Samples(registry_), Contains(age + " 2.5"));
  // A step report, even a repeated one, is a report.
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  clock_.Advance(absl::Seconds(1));
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  EXPECT_EQ(metrics_.LastReportAgeSeconds("gpt-1", 0), 0);
  clock_.Advance(absl::Seconds(4));
  metrics_.Refresh();
  EXPECT_THAT(Samples(registry_), Contains(age + " 4"));
}

TEST_F(RankMetricsTest, ForgetJobRemovesEverySeriesOfTheJob) {
  metrics_.OnStep(Step("gone", 1, 0, 5));
  metrics_.OnStep(Step("gone", 1, 1, 5));
  metrics_.OnPhase(Phase("gone", 1, 2, v1::WORKER_PHASE_INIT));
  metrics_.OnStep(Step("kept", 1, 0, 6));
  metrics_.OnStep(Step("gone", 1, 0, 6));  // Pending summary.
  metrics_.ForgetJob("gone", 1);

  std::vector<std::string> samples = Samples(registry_);
  EXPECT_THAT(samples, Not(Contains(::testing::HasSubstr("\"gone\""))));
  EXPECT_THAT(samples, Contains("ringmaster_step{job_id=\"kept\",rank=\"0\"} 6"));
  EXPECT_THAT(samples, Contains("ringmaster_collective_seconds_total{job_id=\"kept\",rank=\"0\","
                                "op=\"all_reduce\",group=\"dp0\"} 0.125"));
  EXPECT_EQ(metrics_.LastReportAgeSeconds("gone", 0), -1);
  EXPECT_EQ(metrics_.LastReportAgeSeconds("gone", 2), -1);
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].job().job_id(), "kept");
  // The families stay on the page (HELP and TYPE), only the job's series go.
  EXPECT_TRUE(absl::StrContains(registry_.RenderText(), "# TYPE ringmaster_step gauge"));

  // A report of a forgotten generation (one that raced with its worker's exit) brings nothing
  // back; the job's next generation starts over.
  metrics_.OnStep(Step("gone", 1, 0, 7));
  metrics_.OnPhase(Phase("gone", 1, 1, v1::WORKER_PHASE_STEP));
  EXPECT_THAT(Samples(registry_), Not(Contains(::testing::HasSubstr("\"gone\""))));
  EXPECT_TRUE(metrics_.TakeSummaries().empty());
  metrics_.OnStep(Step("gone", 2, 0, 1));
  EXPECT_THAT(Samples(registry_), Contains("ringmaster_step{job_id=\"gone\",rank=\"0\"} 1"));
  metrics_.ForgetJob("gone", 2);

  // A job whose id is a prefix of another's is a different job.
  metrics_.OnStep(Step("kept-2", 1, 0, 1));
  metrics_.ForgetJob("kept", 1);
  EXPECT_THAT(Samples(registry_), Contains("ringmaster_step{job_id=\"kept-2\",rank=\"0\"} 1"));
  EXPECT_THAT(Samples(registry_), Not(Contains(::testing::HasSubstr("\"kept\""))));
}

TEST_F(RankMetricsTest, NewerGenerationStartsOverAndOlderIsIgnored) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 100));
  metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_STEP, /*checkpoint_step=*/100));
  metrics_.TakeSummaries();
  clock_.Advance(absl::Seconds(1));

  // Generation 2 resumes from step 50's checkpoint: its steps count again.
  metrics_.OnPhase(Phase("gpt-1", 2, 0, v1::WORKER_PHASE_INIT));
  metrics_.OnStep(Step("gpt-1", 2, 0, 51));
  // A straggling report of generation 1 changes nothing.
  metrics_.OnStep(Step("gpt-1", 1, 0, 101));
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].job().generation(), 2);
  EXPECT_EQ(summaries[0].step(), 51);
  EXPECT_EQ(summaries[0].checkpoint_step(), -1);
  const std::string l = "{job_id=\"gpt-1\",rank=\"0\"}";
  EXPECT_THAT(Samples(registry_), Contains("ringmaster_step" + l + " 51"));
  EXPECT_THAT(Samples(registry_), Contains("ringmaster_step_seconds_count" + l + " 2"));
}

TEST(RankMetricsConcurrencyTest, ConcurrentReportsAreAllRecorded) {
  metrics::Registry registry;
  FakeClock clock;
  RankMetrics metrics(&registry, &clock, absl::Seconds(1));
  constexpr int kRanks = 8;
  constexpr int kSteps = 400;
  std::atomic<bool> done{false};
  std::map<int, v1::StepSummary> last_summary;  // By rank; the reader's until it is joined.
  std::thread reader([&] {
    // Reads race with the reports; each must see a consistent page.
    while (!done.load()) {
      metrics.Refresh();
      for (v1::StepSummary& s : metrics.TakeSummaries()) {
        if (s.job().job_id() == "gpt-1") last_summary[s.rank()] = s;
      }
      EXPECT_TRUE(absl::StrContains(registry.RenderText(), "# TYPE ringmaster_step gauge"));
      clock.Advance(absl::Milliseconds(100));
    }
  });
  std::thread churn([&] {
    // Another job comes and goes meanwhile.
    for (int i = 0; i < kSteps; ++i) {
      metrics.OnStep(Step("other", i + 1, 0, 1));
      metrics.ForgetJob("other", i + 1);
    }
  });
  std::vector<std::thread> workers;
  for (int r = 0; r < kRanks; ++r) {
    workers.emplace_back([&, r] {
      for (int step = 1; step <= kSteps; ++step) {
        metrics.OnStep(Step("gpt-1", 1, r, step));
        if (step % 50 == 0) {
          metrics.OnPhase(Phase("gpt-1", 1, r, v1::WORKER_PHASE_STEP, /*checkpoint_step=*/step));
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  churn.join();
  done = true;
  reader.join();

  // The final state went out with the reader's summaries or is still pending.
  clock.Advance(absl::Seconds(1));
  for (v1::StepSummary& s : metrics.TakeSummaries()) last_summary[s.rank()] = s;
  std::vector<std::string> samples = Samples(registry);
  for (int r = 0; r < kRanks; ++r) {
    const std::string l = absl::StrCat("{job_id=\"gpt-1\",rank=\"", r, "\"");
    EXPECT_THAT(samples, Contains(absl::StrCat("ringmaster_step", l, "} ", kSteps)));
    EXPECT_THAT(samples, Contains(absl::StrCat("ringmaster_step_seconds_count", l, "} ", kSteps)));
    EXPECT_THAT(samples,
                Contains(absl::StrCat("ringmaster_collective_seconds_total", l,
                                      ",op=\"all_reduce\",group=\"dp0\"} ", kSteps * 0.125)));
  }
  ASSERT_EQ(last_summary.size(), static_cast<size_t>(kRanks));
  for (const auto& [rank, s] : last_summary) {
    EXPECT_EQ(s.step(), kSteps) << "rank " << rank;
    EXPECT_EQ(s.checkpoint_step(), kSteps) << "rank " << rank;
  }
  EXPECT_THAT(samples, Not(Contains(::testing::HasSubstr("\"other\""))));
}

TEST_F(RankMetricsTest, CollectiveReportsUpdateSummariesButAreNoSignOfLife) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 3));  // entered 6 on dp0
  ASSERT_EQ(metrics_.TakeSummaries().size(), 1u);
  clock_.Advance(absl::Seconds(5));
  v1::ReportCollectivesRequest c;
  *c.mutable_worker() = Worker("gpt-1", 1, 0);
  (*c.mutable_collective_entered())["dp0"] = 7;  // waiting inside collective 7
  (*c.mutable_collective_completed())["dp0"] = 6;
  metrics_.OnCollectives(c);
  EXPECT_DOUBLE_EQ(metrics_.LastReportAgeSeconds("gpt-1", 0), 5.0);  // still silent
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].collective_entered().at("dp0"), 7);
  EXPECT_EQ(summaries[0].collective_completed().at("dp0"), 6);
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_collective_sequence{job_id=\"gpt-1\",rank=\"0\",group=\"dp0\","
                       "kind=\"entered\"} 7"));
  // The same numbers again within the interval: no second summary yet; after it, one (the
  // coordinator hears from a live process even when nothing changes).
  metrics_.OnCollectives(c);
  EXPECT_THAT(metrics_.TakeSummaries(), IsEmpty());
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(metrics_.TakeSummaries(), SizeIs(1));
  // A rank's first report may be a collectives one (the Python watch's, before a first step):
  // its numbers reach the coordinator, but it has no last-report age (RingmasterJobHung would
  // read one as a silent stepping rank) until a step or phase report.
  *c.mutable_worker() = Worker("gpt-1", 1, 5);
  metrics_.OnCollectives(c);
  EXPECT_EQ(metrics_.LastReportAgeSeconds("gpt-1", 5), -1);
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].rank(), 5);
  EXPECT_EQ(summaries[0].step(), 0);
  EXPECT_EQ(summaries[0].collective_entered().at("dp0"), 7);
  clock_.Advance(absl::Seconds(3));
  metrics_.Refresh();
  const std::string no_age = "ringmaster_last_report_age_seconds{job_id=\"gpt-1\",rank=\"5\"}";
  for (const std::string& sample : Samples(registry_)) {
    EXPECT_THAT(sample, Not(HasSubstr(no_age)));
  }
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_collective_sequence{job_id=\"gpt-1\",rank=\"5\",group=\"dp0\","
                       "kind=\"entered\"} 7"));
  v1::ReportPhaseRequest phase;
  *phase.mutable_worker() = Worker("gpt-1", 1, 5);
  phase.set_phase(v1::WORKER_PHASE_CHECKPOINT);
  metrics_.OnPhase(phase);
  clock_.Advance(absl::Seconds(2));
  metrics_.Refresh();
  EXPECT_DOUBLE_EQ(metrics_.LastReportAgeSeconds("gpt-1", 5), 2.0);
  EXPECT_THAT(Samples(registry_), Contains(no_age + " 2"));
  // Forgetting the job drops the rank a collectives report made, series and all.
  metrics_.ForgetJob("gpt-1", 1);
  for (const std::string& sample : Samples(registry_)) {
    EXPECT_THAT(sample, Not(HasSubstr("rank=\"5\""))) << sample;
  }
}

TEST_F(RankMetricsTest, PipelineFiguresAreExportedWhenReported) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  EXPECT_EQ(registry_.RenderText().find("ringmaster_bubble_ratio{"), std::string::npos);
  v1::ReportStepRequest r = Step("gpt-1", 1, 0, 2);
  r.set_stage_compute_seconds(0.25);
  r.set_bubble_fraction(0.2);
  metrics_.OnStep(r);
  EXPECT_THAT(Samples(registry_), Contains("ringmaster_bubble_ratio{job_id=\"gpt-1\",rank=\"0\"} 0.2"));
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_stage_compute_seconds{job_id=\"gpt-1\",rank=\"0\"} 0.25"));
  metrics_.ForgetJob("gpt-1", 1);
  EXPECT_EQ(registry_.RenderText().find("ringmaster_bubble_ratio{"), std::string::npos);
}

// Only a worker that reports a gradient norm has the series (a command job need not), and it
// shows a diverged run's NaN as it is.
TEST_F(RankMetricsTest, GradientNormIsExportedWhenReported) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  EXPECT_EQ(registry_.RenderText().find("ringmaster_grad_norm{"), std::string::npos);
  v1::ReportStepRequest r = Step("gpt-1", 1, 0, 2);
  r.set_grad_norm(0.75);
  metrics_.OnStep(r);
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_grad_norm{job_id=\"gpt-1\",rank=\"0\"} 0.75"));
  r = Step("gpt-1", 1, 0, 3);
  r.set_grad_norm(std::nan(""));
  metrics_.OnStep(r);
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_grad_norm{job_id=\"gpt-1\",rank=\"0\"} NaN"));
  metrics_.ForgetJob("gpt-1", 1);
  EXPECT_EQ(registry_.RenderText().find("ringmaster_grad_norm{"), std::string::npos);
}

// The last step's wait for input (0 for a worker that reports none); the summary's mean covers
// its steps.
TEST_F(RankMetricsTest, InputWaitIsExportedAndAveraged) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_input_seconds{job_id=\"gpt-1\",rank=\"0\"} 0"));
  ASSERT_EQ(metrics_.TakeSummaries().size(), 1u);
  clock_.Advance(absl::Seconds(1));
  v1::ReportStepRequest r = Step("gpt-1", 1, 0, 2);
  r.set_input_seconds(0.25);
  metrics_.OnStep(r);
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_input_seconds{job_id=\"gpt-1\",rank=\"0\"} 0.25"));
  metrics_.OnStep(Step("gpt-1", 1, 0, 3));  // none this step
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_input_seconds{job_id=\"gpt-1\",rank=\"0\"} 0"));
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_DOUBLE_EQ(summaries[0].mean_input_seconds(), 0.125);
  clock_.Advance(absl::Seconds(1));
  metrics_.OnStep(Step("gpt-1", 1, 0, 4));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_DOUBLE_EQ(summaries[0].mean_input_seconds(), 0);
  // Part of the compute: a larger figure is taken as all of it (0.375 s here).
  r = Step("gpt-1", 1, 0, 5);
  r.set_input_seconds(2);
  metrics_.OnStep(r);
  EXPECT_THAT(Samples(registry_),
              Contains("ringmaster_input_seconds{job_id=\"gpt-1\",rank=\"0\"} 0.375"));
  metrics_.ForgetJob("gpt-1", 1);
  EXPECT_EQ(registry_.RenderText().find("ringmaster_input_seconds{"), std::string::npos);
}

TEST_F(RankMetricsTest, SummaryCarriesMeansAndTheProcessStartupFigures) {
  v1::ReportStepRequest first = Step("gpt-1", 2, 0, 11);
  first.set_process_start_unix_nanos(1000);
  first.set_rendezvous_seconds(0.25);
  first.set_restore_seconds(0.125);
  first.set_start_step(10);
  first.set_end_time_unix_nanos(5000);
  metrics_.OnStep(first);
  v1::ReportStepRequest second = Step("gpt-1", 2, 0, 12);
  second.set_step_seconds(0.25);
  second.set_compute_seconds(0.125);
  second.set_end_time_unix_nanos(6000);
  metrics_.OnStep(second);
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  const v1::StepSummary& s = summaries[0];
  EXPECT_DOUBLE_EQ(s.mean_compute_seconds(), (0.375 + 0.125) / 2);
  EXPECT_DOUBLE_EQ(s.mean_step_seconds(), (0.5 + 0.25) / 2);
  EXPECT_DOUBLE_EQ(s.step_seconds(), 0.25);  // the last step's own
  EXPECT_EQ(s.steps_in_summary(), 2);
  EXPECT_EQ(s.step_end_unix_nanos(), 6000);
  EXPECT_EQ(s.process_start_unix_nanos(), 1000);  // sticky after the first step
  EXPECT_DOUBLE_EQ(s.rendezvous_seconds(), 0.25);
  EXPECT_DOUBLE_EQ(s.restore_seconds(), 0.125);
  EXPECT_EQ(s.start_step(), 10);
  EXPECT_DOUBLE_EQ(s.first_step_seconds(), 0.5);
  // The next summary's mean covers only the steps after it.
  clock_.Advance(absl::Seconds(1));
  metrics_.OnStep(Step("gpt-1", 2, 0, 13));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_DOUBLE_EQ(summaries[0].mean_compute_seconds(), 0.375);
  EXPECT_DOUBLE_EQ(summaries[0].mean_step_seconds(), 0.5);
  EXPECT_EQ(summaries[0].steps_in_summary(), 1);
}

TEST_F(RankMetricsTest, SummaryWithoutANewStepCarriesNoMeanCompute) {
  // A mid-run link check holds training for seconds, while the collective reporter and the
  // phase reports keep making summaries due: they cover no step, so they must not repeat the
  // last step's compute as a new straggler sample (the coordinator judges only summaries with
  // steps_in_summary > 0).
  v1::ReportStepRequest step = Step("gpt-1", 1, 0, 813);
  step.set_compute_seconds(0.0836);
  metrics_.OnStep(step);
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].steps_in_summary(), 1);
  EXPECT_DOUBLE_EQ(summaries[0].mean_compute_seconds(), 0.0836);
  for (int second = 0; second < 3; ++second) {
    clock_.Advance(absl::Seconds(1));
    if (second == 0) {
      metrics_.OnPhase(Phase("gpt-1", 1, 0, v1::WORKER_PHASE_INIT));
    } else {
      v1::ReportCollectivesRequest c;
      *c.mutable_worker() = Worker("gpt-1", 1, 0);
      (*c.mutable_collective_entered())["dp0"] = 1627 + second;
      (*c.mutable_collective_completed())["dp0"] = 1626 + second;
      metrics_.OnCollectives(c);
    }
    summaries = metrics_.TakeSummaries();
    ASSERT_EQ(summaries.size(), 1u) << "second " << second;
    EXPECT_EQ(summaries[0].step(), 813);  // the latest state, still
    EXPECT_EQ(summaries[0].steps_in_summary(), 0) << "second " << second;
    EXPECT_DOUBLE_EQ(summaries[0].mean_compute_seconds(), 0) << "second " << second;
    EXPECT_DOUBLE_EQ(summaries[0].mean_step_seconds(), 0) << "second " << second;
  }
  // The next step starts a mean of its own.
  clock_.Advance(absl::Seconds(1));
  metrics_.OnStep(Step("gpt-1", 1, 0, 814));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].steps_in_summary(), 1);
  EXPECT_DOUBLE_EQ(summaries[0].mean_compute_seconds(), 0.375);
}

TEST_F(RankMetricsTest, EverySummaryGoesAgainForANewStream) {
  // Rank 0 reported once, that it waits in init_process_group's rendezvous, and fell silent;
  // rank 1 stepped. Both summaries were taken (sent to a coordinator that then restarted).
  v1::ReportCollectivesRequest c;
  *c.mutable_worker() = Worker("gpt-1", 1, 0);
  (*c.mutable_collective_entered())["rendezvous"] = 1;
  (*c.mutable_collective_completed())["rendezvous"] = 0;
  c.set_blocked(true);
  metrics_.OnCollectives(c);
  metrics_.OnStep(Step("gpt-1", 1, 1, 7));
  ASSERT_EQ(metrics_.TakeSummaries().size(), 2u);
  clock_.Advance(absl::Seconds(5));
  EXPECT_TRUE(metrics_.TakeSummaries().empty());  // nothing new
  metrics_.SummarizeAgain({{"gpt-1", 0}, {"gpt-1", 1}, {"gpt-1", 5}});
  std::vector<v1::StepSummary> again = metrics_.TakeSummaries();
  ASSERT_EQ(again.size(), 2u);
  std::map<int, v1::StepSummary> by_rank;
  for (const v1::StepSummary& s : again) by_rank[s.rank()] = s;
  EXPECT_EQ(by_rank[0].collective_entered().at("rendezvous"), 1);
  EXPECT_EQ(by_rank[0].collective_completed().at("rendezvous"), 0);
  EXPECT_EQ(by_rank[1].step(), 7);
  EXPECT_EQ(by_rank[1].steps_in_summary(), 0);  // no step counted twice (stragglers, link watch)
  EXPECT_DOUBLE_EQ(by_rank[1].mean_step_seconds(), 0);
  EXPECT_TRUE(metrics_.TakeSummaries().empty());
  // Rank 1 has exited since (not running): only rank 0's goes.
  clock_.Advance(absl::Seconds(5));
  metrics_.SummarizeAgain({{"gpt-1", 0}});
  again = metrics_.TakeSummaries();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].rank(), 0);
}

TEST_F(RankMetricsTest, AStalledRanksStackGoesOnceUntilItChangesOrTheRankMoves) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 3));
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_FALSE(summaries[0].has_stack());  // never stalled: nothing to say
  v1::ReportCollectivesRequest c;
  *c.mutable_worker() = Worker("gpt-1", 1, 0);
  (*c.mutable_collective_entered())["dp0"] = 6;
  (*c.mutable_collective_completed())["dp0"] = 6;
  c.set_blocked_known(true);
  c.set_stack("train.py:40 in main\ndata.py:12 in __getitem__");
  auto summary_after = [&](const v1::ReportCollectivesRequest& report) {
    clock_.Advance(absl::Seconds(1));
    metrics_.OnCollectives(report);
    std::vector<v1::StepSummary> taken = metrics_.TakeSummaries();
    EXPECT_EQ(taken.size(), 1u);
    return taken.empty() ? v1::StepSummary() : taken[0];
  };
  v1::StepSummary s = summary_after(c);
  ASSERT_TRUE(s.has_stack());
  EXPECT_EQ(s.stack(), c.stack());
  // The same stack a second later: the summary goes (the numbers), the stack does not again.
  EXPECT_FALSE(summary_after(c).has_stack());
  // Another stack: it goes.
  c.set_stack("train.py:40 in main\ndata.py:13 in __getitem__");
  s = summary_after(c);
  EXPECT_EQ(s.stack(), "train.py:40 in main\ndata.py:13 in __getitem__");
  // A summary the link dropped: the next one carries the stack again, unchanged as it is.
  metrics_.StackUnsent("gpt-1", 0);
  EXPECT_EQ(summary_after(c).stack(), c.stack());
  EXPECT_FALSE(summary_after(c).has_stack());
  // A new stream to the coordinator (which may have restarted): the stack goes again.
  metrics_.SummarizeAgain({{"gpt-1", 0}});
  clock_.Advance(absl::Seconds(1));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].stack(), c.stack());
  // It moves (a step): the stack is cleared once, "" in the next summary, then unset.
  clock_.Advance(absl::Seconds(1));
  metrics_.OnStep(Step("gpt-1", 1, 0, 4));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  ASSERT_TRUE(summaries[0].has_stack());
  EXPECT_EQ(summaries[0].stack(), "");
  c.clear_stack();
  EXPECT_FALSE(summary_after(c).has_stack());
  // Stalled again, then a phase report (a checkpoint begins): cleared as well.
  c.set_stack("train.py:41 in main");
  EXPECT_EQ(summary_after(c).stack(), "train.py:41 in main");
  v1::ReportPhaseRequest phase;
  *phase.mutable_worker() = Worker("gpt-1", 1, 0);
  phase.set_phase(v1::WORKER_PHASE_CHECKPOINT);
  clock_.Advance(absl::Seconds(1));
  metrics_.OnPhase(phase);
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_TRUE(summaries[0].has_stack());
  EXPECT_EQ(summaries[0].stack(), "");
  // A new generation starts with nothing sent: its first stack goes.
  *c.mutable_worker() = Worker("gpt-1", 2, 0);
  EXPECT_EQ(summary_after(c).stack(), "train.py:41 in main");
}

// A report with only a stack (the Python watch's before init_process_group) sets the rank's stack
// and sends the summary, without numbers; once a process of the rank has reported numbers, a
// stack-only report (a second Python process beside it: an uploader) changes nothing.
TEST_F(RankMetricsTest, AStackOnlyReportSpeaksForTheRankOnlyBeforeItsNumbers) {
  v1::ReportCollectivesRequest early;
  *early.mutable_worker() = Worker("torch-1", 1, 0);
  early.set_stack("train.py:9 in <module>\ntrain.py:3 in download");
  clock_.Advance(absl::Seconds(1));
  metrics_.OnCollectives(early);
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].stack(), early.stack());
  EXPECT_TRUE(summaries[0].collective_entered().empty());
  v1::ReportCollectivesRequest numbers;
  *numbers.mutable_worker() = Worker("torch-1", 1, 0);
  (*numbers.mutable_collective_entered())["world"] = 4;
  (*numbers.mutable_collective_completed())["world"] = 3;
  numbers.set_blocked(true);
  numbers.set_blocked_known(true);
  numbers.set_stack("train.py:9 in <module>\ntrain.py:30 in main");
  clock_.Advance(absl::Seconds(1));
  metrics_.OnCollectives(numbers);
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].stack(), numbers.stack());
  clock_.Advance(absl::Seconds(1));
  metrics_.OnCollectives(early);  // another process's: nothing due, nothing changed
  EXPECT_TRUE(metrics_.TakeSummaries().empty());
  metrics_.SummarizeAgain({{"torch-1", 0}});
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].stack(), numbers.stack());
  EXPECT_EQ(summaries[0].collective_entered().at("world"), 4);
}

TEST_F(RankMetricsTest, AWatchThatEndedLeavesTheRankUnwatchedUntilItsNextStep) {
  metrics_.OnStep(Step("gpt-1", 1, 0, 7));
  ASSERT_EQ(metrics_.TakeSummaries().size(), 1u);
  v1::ReportCollectivesRequest ended;
  *ended.mutable_worker() = Worker("gpt-1", 1, 0);
  ended.set_blocked_known(true);
  ended.set_watch_ended(true);
  clock_.Advance(absl::Seconds(5));
  metrics_.OnCollectives(ended);
  // One its side thread had in flight changes nothing.
  v1::ReportCollectivesRequest late;
  *late.mutable_worker() = Worker("gpt-1", 1, 0);
  (*late.mutable_collective_entered())["world"] = 9;
  late.set_blocked(true);
  metrics_.OnCollectives(late);
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_TRUE(summaries[0].unwatched());
  EXPECT_TRUE(summaries[0].collective_entered().empty());
  clock_.Advance(absl::Seconds(5));
  metrics_.OnStep(Step("gpt-1", 1, 0, 8));
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_FALSE(summaries[0].unwatched());
}

// The Python watch's report, a second after the previous one: rank 0 outside any collective,
// its training thread at `cpu` seconds.
v1::ReportCollectivesRequest Outside(double cpu) {
  v1::ReportCollectivesRequest r;
  *r.mutable_worker() = Worker("gpt-1", 1, 0);
  (*r.mutable_collective_entered())["world"] = 9;
  (*r.mutable_collective_completed())["world"] = 9;
  r.set_blocked_known(true);
  r.set_thread_cpu_seconds(cpu);
  return r;
}

TEST_F(RankMetricsTest, ARankThatStepsThenRunsOutsideCollectivesIsWorking) {
  // Before its first step a running thread is not called working (rank 0 preparing data behind
  // a barrier is judged by the wait allowance, agent/local_watchdog.h).
  double cpu = 10;
  for (int i = 0; i < 3; ++i, cpu += 0.8) {
    clock_.Advance(absl::Seconds(1));
    metrics_.OnCollectives(Outside(cpu));
  }
  std::vector<v1::StepSummary> summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_FALSE(summaries[0].working());

  metrics_.OnStep(Step("gpt-1", 1, 0, 1));
  for (int i = 0; i < 3; ++i, cpu += 0.8) {
    clock_.Advance(absl::Seconds(1));
    metrics_.OnCollectives(Outside(cpu));
  }
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_TRUE(summaries[0].working());
  // Its side thread falls silent (a frozen process): a summary taken later says no more.
  clock_.Advance(absl::Seconds(4));
  metrics_.SummarizeAgain({{"gpt-1", 0}});
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_FALSE(summaries[0].working());

  // Its thread stops (a loader waiting on a dead worker): not working once the window holds
  // too little of its CPU.
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(absl::Seconds(1));
    metrics_.OnCollectives(Outside(cpu));
  }
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_FALSE(summaries[0].working());

  for (int i = 0; i < 3; ++i, cpu += 0.8) {
    clock_.Advance(absl::Seconds(1));
    metrics_.OnCollectives(Outside(cpu));
  }
  ASSERT_TRUE(metrics_.TakeSummaries().at(0).working());
  v1::ReportCollectivesRequest ended = Outside(cpu);
  ended.set_watch_ended(true);
  clock_.Advance(absl::Seconds(1));
  metrics_.OnCollectives(ended);
  summaries = metrics_.TakeSummaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_FALSE(summaries[0].working());
}

TEST_F(RankMetricsTest, CollectiveSeriesPerRankAreBounded) {
  // A worker that names new groups at every step (a bug, or a group per step) stops adding
  // series at the bound; the groups it already has keep updating.
  const size_t bound = RankMetrics::kMaxCollectiveSeriesPerRank;
  for (size_t step = 1; step <= 2 * bound + 10; ++step) {
    v1::ReportStepRequest r = Step("gpt-1", 1, 0, static_cast<int64_t>(step));
    r.mutable_collectives(0)->set_group(absl::StrCat("g", step));
    r.mutable_collectives(0)->set_algbw_bytes_per_second(static_cast<double>(step));
    (*r.mutable_collective_entered())[absl::StrCat("g", step)] = 1;
    metrics_.OnStep(r);
  }
  v1::ReportStepRequest again = Step("gpt-1", 1, 0, static_cast<int64_t>(2 * bound + 11));
  again.mutable_collectives(0)->set_group("g1");
  again.mutable_collectives(0)->set_algbw_bytes_per_second(99);
  metrics_.OnStep(again);
  size_t algbw = 0;
  size_t sequences = 0;
  bool updated = false;
  for (const std::string& sample : Samples(registry_)) {
    if (absl::StartsWith(sample, "ringmaster_collective_algbw_bytes_per_second{")) {
      ++algbw;
      updated =
          updated || (absl::StrContains(sample, "group=\"g1\"") && absl::EndsWith(sample, " 99"));
    }
    if (absl::StartsWith(sample, "ringmaster_collective_sequence{")) ++sequences;
  }
  EXPECT_EQ(algbw, bound);
  EXPECT_TRUE(updated);
  // dp0 entered and completed from every report, plus one entered series per new group, up to
  // their own bound.
  EXPECT_EQ(sequences, 2 * bound);
}

}  // namespace
}  // namespace ringmaster::agent
