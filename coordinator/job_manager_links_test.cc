// The automatic link check in the job manager (job_manager_links.cc, link_watch.h): a running
// job's step time that rises with no compute slowdown makes the coordinator ask rank 0 for a link
// check by itself; its verdict names the slow link (event, series); the step time coming back makes
// it check again, and that verdict says the link recovered. Never a restart.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;

class JobManagerLinksTest : public JobManagerTest {
 protected:
  // Nodes n1 and n2 with 2 devices each and a running 4-rank data-parallel job over both, whose
  // watchdog is `watchdog`.
  void Run(const v1::WatchdogSpec& watchdog) {
    AddNode("n1", 2);
    AddNode("n2", 2);
    v1::JobSpec spec = Spec(2, 2);
    *spec.mutable_watchdog() = watchdog;
    auto job = jobs_->Submit(spec, "", alice_);
    ASSERT_TRUE(job.ok()) << job.status();
    id_ = job->job_id();
    running_ = Current(id_);
    ASSERT_EQ(running_.state(), v1::JOB_STATE_RUNNING);
    node_.resize(4);
    for (const auto& a : running_.assignments()) node_[a.rank()] = a.node();
    ASSERT_NE(node_[1], node_[2]);
    Check({20, 2, 20, 2});  // the generation's start-up check: a program that runs checks
  }

  // `seconds` of training: each rank's summary once a second (20 steps of `step_seconds` each,
  // `compute` of them computing, or compute(rank)), its last step `last` times as long (the
  // noise of one step) unless `last` is 0. Without `means`, an agent before mean_step_seconds.
  // Returns the CheckLinks sent meanwhile.
  int Train(int seconds, double step_seconds, const std::vector<double>& compute,
            double last = 1, bool means = true) {
    int checks = 0;
    for (int s = 0; s < seconds; ++s) {
      clock_.Advance(absl::Seconds(1));
      step_ += 20;
      for (int rank = 0; rank < 4; ++rank) {
        const size_t before = sink_.sent.size();
        v1::StepSummary summary = Summary(running_, rank, step_, step_, step_, compute[rank]);
        summary.set_step_seconds(step_seconds * last);
        summary.set_compute_seconds(compute[rank]);
        summary.set_steps_in_summary(20);
        if (means) summary.set_mean_step_seconds(step_seconds);
        jobs_->OnStepSummary(summary);
        for (size_t i = before; i < sink_.sent.size(); ++i) {
          if (!sink_.sent[i].second.has_check_links()) continue;
          EXPECT_EQ(sink_.sent[i].first, node_[0]);
          EXPECT_EQ(sink_.sent[i].second.check_links().job().generation(),
                    running_.generation());
          ++checks;
        }
      }
    }
    return checks;
  }
  int Train(int seconds, double step_seconds, double compute = 0.01) {
    return Train(seconds, step_seconds, std::vector<double>(4, compute));
  }
  // The same from an agent that sends no means: its summaries' last steps are the samples.
  int TrainOldAgent(int seconds, double step_seconds) {
    return Train(seconds, step_seconds, std::vector<double>(4, 0.01), 1, false);
  }

  // Every rank's check after the current step, its dp0 ring edges at gbps[edge] GB/s (the edge
  // between ranks edge and edge+1).
  void Check(const std::vector<double>& gbps) {
    for (int rank = 0; rank < 4; ++rank) {
      v1::LinkReport r;
      *r.mutable_job() = Generation(running_);
      r.set_rank(rank);
      r.set_step(step_);
      r.set_seconds(0.1);
      for (const int edge : {rank, (rank + 3) % 4}) {
        v1::LinkStat* l = r.add_links();
        l->set_group("dp0");
        l->set_peer_rank(edge == rank ? (rank + 1) % 4 : edge);
        l->set_bytes(4 << 20);
        l->set_seconds((4 << 20) / (gbps[edge] * 1e9));
      }
      jobs_->OnLinkReport(r);
    }
  }

  std::string SlowLinkSeries() const {
    return absl::StrCat("ringmaster_slow_link{job_id=\"", id_,
                        "\",group=\"dp0\",rank=\"1\",peer_rank=\"2\",node=\"", node_[1],
                        "\",peer_node=\"", node_[2], "\"}");
  }

  std::string id_;
  v1::JobStatus running_;
  std::vector<std::string> node_;
  int64_t step_ = 0;
};

v1::WatchdogSpec Interval(double seconds) {
  v1::WatchdogSpec w;
  w.set_auto_link_check_interval_seconds(seconds);
  return w;
}

TEST_F(JobManagerLinksTest, ARiseInStepTimeIsLocalisedUnaskedAndItsRecoveryIsSaid) {
  Run(Interval(10));
  ASSERT_EQ(Train(30, 0.05), 0);
  // The link between ranks 1 and 2 falls to a few percent: the steps take 5x as long, waiting in
  // the collectives, computing as before.
  const absl::Time degraded = clock_.Now();
  int checks = 0;
  for (int s = 0; s < 30 && checks == 0; ++s) checks += Train(1, 0.25);
  ASSERT_EQ(checks, 1);
  EXPECT_LE(clock_.Now() - degraded, absl::Seconds(5));
  auto got = jobs_->Get(id_);
  std::vector<v1::JobEvent> asked = EventsOf(*got, "link_check");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_THAT(asked[0].message(), HasSubstr("link check started by the coordinator: step time "));
  EXPECT_THAT(asked[0].message(),
              HasSubstr("x the job's baseline of 0.05 s (medians of 24 and 104 rank reports), and "
                        "no rank's compute time rose to explain it; the ranks run it after an "
                        "upcoming step"));
  // The ranks' verdict names the slow link with both ranks and nodes.
  Check({20, 0.05, 20, 2});
  got = jobs_->Get(id_);
  std::vector<v1::JobEvent> slow = EventsOf(*got, "slow_link");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_THAT(slow[0].message(), HasSubstr(absl::StrCat("dp0: rank 1 (", node_[1], ") <-> rank 2 (",
                                                         node_[2], "): 50.00 MB/s each way")));
  EXPECT_THAT(slow[0].ranks(), ::testing::ElementsAre(1, 2));
  EXPECT_NEAR(SeriesValue(registry_.RenderText(), SlowLinkSeries()), 0.025, 1e-9);

  // Still slow: no second check however long it lasts.
  EXPECT_EQ(Train(60, 0.25), 0);
  // Restored: a confirming check, and its verdict says the link recovered; the series is gone.
  checks = 0;
  for (int s = 0; s < 30 && checks == 0; ++s) checks += Train(1, 0.05);
  ASSERT_EQ(checks, 1);
  got = jobs_->Get(id_);
  asked = EventsOf(*got, "link_check");
  ASSERT_EQ(asked.size(), 3u);  // the first request, its verdict, the confirming request
  EXPECT_THAT(asked[2].message(),
              HasSubstr("started by the coordinator to confirm the links recovered: step time "
                        "0.05 s is back to 1.00x"));
  Check({20, 2, 20, 2});
  got = jobs_->Get(id_);
  const std::vector<v1::JobEvent> recovered = EventsOf(*got, "link_recovered");
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].message(),
            absl::StrCat("dp0: rank 1 (", node_[1], ") <-> rank 2 (", node_[2],
                         ") recovered: not slow in the link check after step ", step_));
  EXPECT_EQ(registry_.RenderText().find("ringmaster_slow_link{"), std::string::npos);
  // News, never a restart.
  EXPECT_EQ(got->job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(got->job().generation(), running_.generation());
  EXPECT_TRUE(sink_.Stops().empty());
  EXPECT_EQ(Train(60, 0.05), 0);
}

TEST_F(JobManagerLinksTest, AComputeSlowdownIsNotALinkToCheck) {
  Run(Interval(10));
  ASSERT_EQ(Train(30, 0.05), 0);
  // Rank 3 computes 0.2 s more a step: everyone waits for it, but that is compute (a straggler).
  EXPECT_EQ(Train(60, 0.25, {0.01, 0.01, 0.01, 0.21}), 0);
  EXPECT_TRUE(EventsOf(*jobs_->Get(id_), "link_check").empty());
}

TEST_F(JobManagerLinksTest, TheMeanStepTimeIsJudgedNotOneNoisyStep) {
  Run(Interval(10));
  ASSERT_EQ(Train(30, 0.05), 0);
  // Each summary's last step took 3x the others (a host's hiccup in a job of fast steps); the
  // steps it covers took 0.05 s on average, as before: nothing to check.
  EXPECT_EQ(Train(60, 0.05, std::vector<double>(4, 0.01), 3), 0);
  EXPECT_TRUE(EventsOf(*jobs_->Get(id_), "link_check").empty());
  // The mean itself rising is a drop.
  int checks = 0;
  for (int s = 0; s < 30 && checks == 0; ++s) checks += Train(1, 0.25);
  EXPECT_EQ(checks, 1);
}

TEST_F(JobManagerLinksTest, AnAgentThatSendsNoMeansIsJudgedByTheLastSteps) {
  Run(Interval(10));
  ASSERT_EQ(TrainOldAgent(30, 0.05), 0);
  int checks = 0;
  for (int s = 0; s < 30 && checks == 0; ++s) checks += TrainOldAgent(1, 0.25);
  EXPECT_EQ(checks, 1);
  EXPECT_THAT(EventsOf(*jobs_->Get(id_), "link_check")[0].message(),
              HasSubstr("x the job's baseline of 0.05 s"));
}

TEST_F(JobManagerLinksTest, AProgramThatNeverRanACheckIsNotAskedForOne) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  auto job = jobs_->Submit(Spec(2, 2), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  id_ = job->job_id();
  running_ = Current(id_);
  node_ = {"", "", "", ""};
  ASSERT_EQ(Train(30, 0.05), 0);
  EXPECT_EQ(Train(30, 0.25), 0);  // no start-up check was reported: not the trainer
}

TEST_F(JobManagerLinksTest, TheAutomaticCheckCanBeTurnedOff) {
  v1::WatchdogSpec off = Interval(10);
  off.set_auto_link_check_disabled(true);
  Run(off);
  ASSERT_EQ(Train(30, 0.05), 0);
  EXPECT_EQ(Train(30, 0.25), 0);
  // And with the link check itself off.
  v1::WatchdogSpec no_check = Interval(10);
  no_check.set_link_check_disabled(true);
  ASSERT_TRUE(jobs_->Cancel(id_, "", alice_).ok());
  sink_.sent.clear();
  step_ = 0;
  auto job = jobs_->Submit([&] {
    v1::JobSpec spec = Spec(2, 2);
    *spec.mutable_watchdog() = no_check;
    return spec;
  }(), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  id_ = job->job_id();
  running_ = Current(id_);
  ASSERT_EQ(running_.state(), v1::JOB_STATE_RUNNING);
  for (const auto& a : running_.assignments()) node_[a.rank()] = a.node();
  Check({20, 2, 20, 2});
  ASSERT_EQ(Train(30, 0.05), 0);
  EXPECT_EQ(Train(30, 0.25), 0);
}

}  // namespace
}  // namespace ringmaster::coordinator
