#include "ctl/format.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::ctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::GetJobResponse RestartingJob() {
  v1::GetJobResponse r;
  v1::JobStatus* j = r.mutable_job();
  j->set_job_id("gpt-1");
  j->set_state(v1::JOB_STATE_RESTARTING);
  j->set_generation(3);
  return r;
}

int64_t At(const char* when) {
  absl::Time t;
  std::string error;
  EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, when, &t, &error)) << error;
  return absl::ToUnixNanos(t);
}

TEST(DescribeJobTest, ADrainsWaitNamesTheRanksAndTheDeadline) {
  v1::GetJobResponse r = RestartingJob();
  r.mutable_job()->add_stopping_ranks(0);
  r.mutable_job()->add_stopping_ranks(5);
  r.mutable_job()->set_stopping_deadline_unix_nanos(At("2026-11-24T03:00:00Z"));
  EXPECT_THAT(DescribeJob(r), HasSubstr("Waiting for:  ranks 0, 5 of generation 3 to checkpoint "
                                        "and exit, until 2026-11-24T03:00:00Z\n"));
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Crash loop")));
}

TEST(DescribeJobTest, SparesAndAShrunkElasticJobAreShown) {
  v1::GetJobResponse r;
  v1::JobStatus* j = r.mutable_job();
  j->set_state(v1::JOB_STATE_RUNNING);
  j->mutable_spec()->set_nodes(4);
  j->mutable_spec()->set_devices_per_node(1);
  j->mutable_spec()->set_spares(2);
  j->mutable_plan()->mutable_parallelism()->set_data(4);
  j->set_elastic_nodes(2);
  j->add_spare_nodes("agent-4");
  const std::string described = DescribeJob(r);
  EXPECT_THAT(described, HasSubstr("; running on 2 of 4 nodes, DP 2, elastic_batch global\n"));
  j->mutable_spec()->set_elastic_batch(v1::ELASTIC_BATCH_PER_REPLICA);
  EXPECT_THAT(DescribeJob(r), HasSubstr("; running on 2 of 4 nodes, DP 2, elastic_batch "
                                        "per_replica (learning rate x0.5)\n"));
  EXPECT_THAT(described, HasSubstr("Spares:       agent-4 (idle); 1 of 2 held, the rest when "
                                   "nodes free up\n"));
  j->mutable_spec()->set_spares(0);
  j->clear_spare_nodes();
  j->set_elastic_nodes(0);
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Spares:")));
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("running on")));
}

TEST(DescribeJobTest, AnElasticWaitForAReplacementIsShown) {
  v1::GetJobResponse r;
  v1::JobStatus* j = r.mutable_job();
  j->set_state(v1::JOB_STATE_RESTARTING);
  j->mutable_spec()->set_nodes(4);
  j->set_elastic_wait_until_unix_nanos(1795921200LL * 1000000000LL);
  EXPECT_THAT(DescribeJob(r), HasSubstr("Elastic wait: for a replacement at 4 nodes until "
                                        "2026-11-29T03:00:00Z, then shrinking\n"));
  j->set_state(v1::JOB_STATE_RUNNING);
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Elastic wait")));
}

TEST(DescribeJobTest, RestartsSayHowManyCountWithinTheWindow) {
  v1::GetJobResponse r = RestartingJob();
  r.mutable_job()->set_restarts(2);
  r.mutable_job()->mutable_spec()->mutable_restart()->set_max_restarts(3);
  EXPECT_THAT(DescribeJob(r), HasSubstr("Generation:   3   Restarts: 2 of 3\n"));
  r.mutable_job()->mutable_spec()->mutable_restart()->set_window_minutes(60);
  r.mutable_job()->set_restarts(0);
  EXPECT_THAT(DescribeJob(r), HasSubstr("Restarts: 0 (of 3 within 60 minutes)\n"));
  r.mutable_job()->set_restarts(2);
  r.mutable_job()->add_counted_restart_unix_nanos(At("2026-11-24T03:00:08Z"));
  EXPECT_THAT(DescribeJob(r),
              HasSubstr("Generation:   3   Restarts: 2 (1 of 3 within 60 minutes at the "
                        "last failure)\n"));
}

TEST(DescribeJobTest, EventsLeftOutAreCountedWithWhereToReadThem) {
  v1::GetJobResponse r = RestartingJob();
  r.add_events()->set_sequence(1);
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("left out")));
  r.set_events_omitted(1500);
  EXPECT_THAT(DescribeJob(r), HasSubstr("\nEvents:\n  (1500 older events left out: `ringctl "
                                        "watch gpt-1` lists them all)\n"));
}

TEST(DescribeJobTest, ACrashLoopsBackoffSaysWhenTheNextLaunchIs) {
  v1::GetJobResponse r = RestartingJob();
  r.mutable_job()->set_failures_before_a_step(4);
  r.mutable_job()->set_backoff_until_unix_nanos(At("2026-11-24T03:00:08Z"));
  EXPECT_THAT(DescribeJob(r),
              HasSubstr("Crash loop:   4 generations in a row failed before their first step; "
                        "next launch at 2026-11-24T03:00:08Z\n"));
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Waiting for")));
  // Once launched, the stored count stays until a step, but there is no wait to show.
  r.mutable_job()->set_state(v1::JOB_STATE_RUNNING);
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Crash loop")));
}

TEST(DescribeJobTest, ARunningJobsAssignmentsSayEachRanksStepHeardStatusAndNow) {
  v1::GetJobResponse r;
  v1::JobStatus* j = r.mutable_job();
  j->set_state(v1::JOB_STATE_RUNNING);
  for (int rank = 0; rank < 4; ++rank) {
    v1::RankAssignment* a = j->add_assignments();
    a->set_rank(rank);
    a->set_node("n1");
    a->set_local_device(rank);
    a->set_dp_rank(rank);
    v1::RankLiveState* live = r.add_ranks();
    live->set_rank(rank);
    live->set_step(120);
    live->set_last_report_age_seconds(0.4);
  }
  r.mutable_ranks(1)->set_step(97);
  r.mutable_ranks(1)->set_last_report_age_seconds(42.25);
  r.mutable_ranks(1)->set_hang_suspect(true);
  r.mutable_ranks(2)->set_straggler(true);
  r.mutable_ranks(2)->set_compute_ratio(1.847);
  r.mutable_ranks(3)->set_last_report_age_seconds(-1);
  r.mutable_ranks(3)->set_finished(true);
  r.mutable_ranks(0)->set_activity("in world #98");
  r.mutable_ranks(1)->set_activity("behind world #98 (at #97)");
  const std::string text = DescribeJob(r);
  EXPECT_THAT(text, HasSubstr("STEP  HEARD      STATUS             NOW\n"));
  EXPECT_THAT(text, HasSubstr("120   0.4s ago   -                  in world #98\n"));
  EXPECT_THAT(text, HasSubstr("97    42.2s ago  hang suspect       behind world #98 (at #97)\n"));
  EXPECT_THAT(text, HasSubstr("120   0.4s ago   straggler (1.85x)  -\n"));
  EXPECT_THAT(text, HasSubstr("120   never      finished           -\n"));
  EXPECT_THAT(text, Not(HasSubstr("stalled at")));
  // A stalled Python rank's stack follows the table, a frame per line; ranks stalled at the
  // same place together.
  r.mutable_ranks(1)->set_stack(
      "train.py:30 in <module>\ntrain.py:18 in main\nqueue.py:171 in get");
  EXPECT_THAT(DescribeJob(r), HasSubstr("\nRank 1 stalled at (innermost last):\n"
                                        "  train.py:30 in <module>\n  train.py:18 in main\n"
                                        "  queue.py:171 in get\n\nGroups:"));
  for (int rank : {0, 2}) {
    r.mutable_ranks(rank)->set_stack("train.py:30 in <module>\nc10d.py:9 in x");
  }
  EXPECT_THAT(DescribeJob(r), HasSubstr("\nRanks 0, 2 stalled at (innermost last):\n"
                                        "  train.py:30 in <module>\n  c10d.py:9 in x\n"
                                        "\nRank 1 stalled at (innermost last):\n"));
  // Without live states (not running) the table has no such columns.
  r.clear_ranks();
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("HEARD")));
}

TEST(DescribeJobTest, TheLinkCheckSaysEachKindOfLinkAndNamesTheSlowOnes) {
  v1::GetJobResponse r;
  r.mutable_job()->set_state(v1::JOB_STATE_RUNNING);
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Links")));  // none reported
  v1::LinkCheckSummary* check = r.mutable_link_check();
  check->set_generation(2);
  check->set_ranks_reported(3);
  check->set_ranks_expected(4);
  EXPECT_THAT(DescribeJob(r), HasSubstr("Links (link check of generation 2, 3 of 4 ranks "
                                        "reported):\n  judged once every rank has reported\n"));
  check->set_ranks_reported(4);
  EXPECT_THAT(DescribeJob(r), HasSubstr("  none measured (no group crosses a link)\n"));
  v1::LinkClass* c = check->add_classes();
  c->set_kind("dp");
  c->set_cross_node(true);
  c->set_links(2);
  c->set_median_bytes_per_second(1.05e9);
  c->set_min_bytes_per_second(1e8);
  EXPECT_THAT(DescribeJob(r), HasSubstr("  no slow or corrupting link\n"));
  v1::LinkState* slow = check->add_slow();
  slow->set_group("dp0");
  slow->set_rank(1);
  slow->set_peer_rank(2);
  slow->set_node("agent-0");
  slow->set_peer_node("agent-1");
  slow->set_bytes_per_second(1e8);
  slow->set_baseline_bytes_per_second(2e9);
  v1::LinkState* corrupt = check->add_slow();
  *corrupt = *slow;
  corrupt->set_group("tp3");
  corrupt->set_baseline_bytes_per_second(0);
  corrupt->set_wrong(12);
  const std::string text = DescribeJob(r);
  EXPECT_THAT(text, HasSubstr("  KIND  SCOPE         LINKS  MEDIAN     LOWEST\n"
                              "  dp    across nodes  2      1.05 GB/s  0.10 GB/s\n"));
  EXPECT_THAT(text, HasSubstr("  dp0 rank 1 (agent-0) <-> rank 2 (agent-1): 0.10 GB/s SLOW: 0.05x "
                              "the median of the others (2.00 GB/s)\n"));
  EXPECT_THAT(text, HasSubstr("  tp3 rank 1 (agent-0) <-> rank 2 (agent-1): 0.10 GB/s CORRUPTS "
                              "DATA (12 elements arrived wrong)\n"));
  check->set_min_bytes_per_second(5e9);
  slow->set_below_floor(true);
  EXPECT_THAT(DescribeJob(r), HasSubstr("4 of 4 ranks reported; floor 5.00 GB/s):\n"));
  check->set_step(40);  // a requested check (ringctl check-links)
  EXPECT_THAT(DescribeJob(r), HasSubstr("Links (link check of generation 2 after step 40, 4 of 4"));
  EXPECT_THAT(DescribeJob(r), HasSubstr("0.10 GB/s SLOW (below the floor): 0.05x the median"));
}

TEST(FormatNodesTest, ASettlingNodeIsSaidWithItsLossesAndTimeLeft) {
  std::vector<v1::NodeStatus> nodes(3);
  for (int i = 0; i < 3; ++i) {
    nodes[i].set_name(absl::StrCat("n", i + 1));
    nodes[i].set_device_kind("cpu");
    nodes[i].set_devices(1);
    nodes[i].set_alive(true);
  }
  nodes[1].set_recent_losses(3);
  nodes[1].set_settling_seconds(99.2);
  nodes[2].set_recent_losses(1);  // one loss: not settling
  const std::string out = FormatNodes(nodes, absl::UnixEpoch(), /*wide=*/false);
  EXPECT_THAT(out, HasSubstr("SETTLING"));
  EXPECT_EQ(out.find("SETTLING"), out.rfind("SETTLING")) << out;
  EXPECT_THAT(out, HasSubstr("n2: lost 3 times lately: settling for 1m40s more (jobs keep off "
                             "it while other nodes fit)\n"));
  EXPECT_THAT(out, Not(HasSubstr("n3: lost")));
  EXPECT_THAT(FormatNodes(nodes, absl::UnixEpoch(), /*wide=*/true), HasSubstr("n2: lost 3 times"));
}

}  // namespace
}  // namespace ringmaster::ctl
