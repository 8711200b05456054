#include "ctl/live_block.h"

#include <sstream>

#include "absl/strings/str_split.h"
#include "ctl/golden.h"
#include "gtest/gtest.h"

namespace ringmaster::ctl {
namespace {

LiveStatus Running(int64_t step, int64_t total) {
  LiveStatus s;
  s.job_id = "tiny-1";
  s.state = v1::JOB_STATE_RUNNING;
  s.generation = 1;
  s.total_steps = total;
  s.progress.set_step(step);
  s.progress.set_loss(3.41);
  s.progress.set_tokens_per_second(5120);
  s.progress.set_step_seconds(0.21);
  s.progress.set_checkpoint_step(40);
  s.progress.set_mfu(0.41);
  return s;
}

TEST(LiveBlockTest, EtaIsTheStepsLeftAtTheMedianStepTime) {
  EXPECT_EQ(Eta(50, 100, 0.2), absl::Seconds(10));
  EXPECT_EQ(Eta(100, 100, 0.2), absl::ZeroDuration());
  EXPECT_EQ(Eta(120, 100, 0), absl::ZeroDuration());  // a job that went past its total
  EXPECT_EQ(Eta(0, 100, 0.2), std::nullopt);          // not started
  EXPECT_EQ(Eta(5, 0, 0.2), std::nullopt);            // no total
  EXPECT_EQ(Eta(5, 100, 0), std::nullopt);            // no step time yet
  EXPECT_EQ(FormatEta(std::nullopt), "?");
  EXPECT_EQ(FormatEta(absl::Seconds(44.6)), "45s");
  EXPECT_EQ(FormatEta(absl::Seconds(725)), "12m05s");
  EXPECT_EQ(FormatEta(absl::Seconds(3 * 3600 + 7 * 60 + 59)), "3h07m");
}

TEST(LiveBlockTest, ProgressBarFillsItsInnerCellsRoundedDown) {
  EXPECT_EQ(ProgressBar(0, 12), "[..........]");
  EXPECT_EQ(ProgressBar(0.5, 12), "[#####.....]");
  EXPECT_EQ(ProgressBar(0.99, 12), "[#########.]");
  EXPECT_EQ(ProgressBar(1, 12), "[##########]");
  EXPECT_EQ(ProgressBar(7, 12), "[##########]");
  EXPECT_EQ(ProgressBar(-1, 5), "[...]");
  EXPECT_EQ(ProgressBar(0.5, 1), "[.]");
}

TEST(LiveBlockTest, BlockShowsBarEtaAndFigures) {
  EXPECT_EQ(RenderBlock(Running(50, 100), 200),
            (std::vector<std::string>{
                "RUNNING gen 1  [##########..........]   50%  step 50/100  ETA 11s",
                "loss 3.4100  tokens/s 5120  MFU 41.0%  step 0.210s  ckpt 40  restarts 0"}));
}

TEST(LiveBlockTest, BlockBeforeTheFirstStepShowsNoFigures) {
  LiveStatus s = Running(0, 20);
  s.state = v1::JOB_STATE_PENDING;
  s.generation = 0;
  s.progress = v1::JobProgress();
  EXPECT_EQ(
      RenderBlock(s, 200),
      (std::vector<std::string>{"PENDING gen 0  [....................]    0%  step 0/20  ETA ?",
                                "loss -  tokens/s -  MFU -  step -  ckpt -  restarts 0"}));
}

TEST(LiveBlockTest, FinalBlockAfterRestartsWithoutMfuNorTotal) {
  LiveStatus s = Running(20, 20);
  s.state = v1::JOB_STATE_SUCCEEDED;
  s.generation = 3;
  s.progress.set_mfu(0);
  EXPECT_EQ(RenderBlock(s, 200)[0],
            "SUCCEEDED gen 3  [####################]  100%  step 20/20  ETA 0s");
  EXPECT_EQ(RenderBlock(s, 200)[1],
            "loss 3.4100  tokens/s 5120  MFU -  step 0.210s  ckpt 40  restarts 2");
  s.total_steps = 0;  // a command job that does not say its steps
  EXPECT_EQ(RenderBlock(s, 200)[0], "SUCCEEDED gen 3  step 20");
}

TEST(LiveBlockTest, LinesAreCutToTheTerminalWidth) {
  const std::vector<std::string> lines = RenderBlock(Running(50, 100), 30);
  EXPECT_EQ(lines[0], "RUNNING gen 1  [##########....");
  EXPECT_EQ(lines[1], "loss 3.4100  tokens/s 5120  MF");
  EXPECT_EQ(FitWidth("ab\xc3\xa9"
                     "cd",
                     3),
            "ab");                       // not inside "é"
  EXPECT_EQ(FitWidth("abc", 0), "abc");  // 0: not cut
}

TEST(LiveBlockTest, EventsGoAboveTheBlockWhichIsRedrawnInPlace) {
  std::ostringstream out;
  LiveBlock block(&out, 200);
  block.Print("event one");  // no block yet: just the line
  block.Update(Running(10, 100));
  block.Update(Running(20, 100));
  block.Print("event two");
  const std::string up = "\x1b[1A\x1b[2K";
  EXPECT_EQ(out.str(),
            "event one\n"
            "RUNNING gen 1  [##..................]   10%  step 10/100  ETA 19s\n"
            "loss 3.4100  tokens/s 5120  MFU 41.0%  step 0.210s  ckpt 40  restarts 0\n" +
                up + up +
                "RUNNING gen 1  [####................]   20%  step 20/100  ETA 17s\n"
                "loss 3.4100  tokens/s 5120  MFU 41.0%  step 0.210s  ckpt 40  restarts 0\n" +
                up + up + "event two\n" +
                "RUNNING gen 1  [####................]   20%  step 20/100  ETA 17s\n"
                "loss 3.4100  tokens/s 5120  MFU 41.0%  step 0.210s  ckpt 40  restarts 0\n");
}

v1::GetJobResponse TopJob() {
  v1::GetJobResponse job;
  v1::JobStatus* j = job.mutable_job();
  j->set_job_id("tiny-1");
  j->set_state(v1::JOB_STATE_RUNNING);
  j->set_generation(2);
  j->mutable_spec()->mutable_trainer()->set_steps(100);
  j->mutable_progress()->set_step(50);
  j->mutable_progress()->set_loss(2.5);
  j->mutable_progress()->set_tokens_per_second(1000);
  j->mutable_progress()->set_step_seconds(0.5);
  for (int rank = 0; rank < 3; ++rank) {
    v1::RankAssignment* a = j->add_assignments();
    a->set_rank(rank);
    a->set_node(rank < 2 ? "agent-0" : "agent-1");
    v1::RankLiveState* r = job.add_ranks();
    r->set_rank(rank);
    r->set_step(50 + rank);
    r->set_last_report_age_seconds(0.25 * rank);
    r->set_step_seconds_p50(0.5);
    r->set_step_seconds_p99(0.75);
    r->set_compute_share(0.8);
    r->set_busbw_bytes_per_second(1.25e9);
    r->set_mfu(0.3);
  }
  v1::RankLiveState* slow = job.mutable_ranks(1);
  slow->set_straggler(true);
  slow->set_compute_ratio(1.85);
  slow->set_hang_suspect(true);
  slow->set_activity("behind world #35 (at #34)");
  job.mutable_ranks(0)->set_activity("in world #35");
  v1::RankLiveState* silent = job.mutable_ranks(2);
  silent->set_last_report_age_seconds(-1);
  silent->set_step(0);
  silent->set_step_seconds_p50(0);
  silent->set_step_seconds_p99(0);
  silent->set_compute_share(0);
  silent->set_busbw_bytes_per_second(0);
  silent->set_mfu(0);
  return job;
}

TEST(LiveBlockTest, TopShowsEveryRankWithItsFiguresAndFlags) {
  const v1::GetJobResponse job = TopJob();
  ExpectGolden(RenderTop(job, job.ranks(), 0), "top.txt");
}

TEST(LiveBlockTest, TopAfterTheEndShowsTheFinalStateAndTheRanksLastSeen) {
  v1::GetJobResponse job = TopJob();
  const auto last_seen = job.ranks();
  job.clear_ranks();  // the coordinator has no live ranks once the job ended
  job.mutable_job()->set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_job()->mutable_progress()->set_step(100);
  ExpectGolden(RenderTop(job, last_seen, 0), "top_final.txt");
  EXPECT_EQ(RenderTop(job, {}, 0),
            "job tiny-1  SUCCEEDED gen 2  [####################]  100%  step 100/100  ETA 0s\n"
            "loss 2.5000  tokens/s 1000  MFU -  step 0.500s  ckpt -  restarts 1\n\n"
            "no ranks running (SUCCEEDED)\n");
}

TEST(LiveBlockTest, TopLinesAreCutToTheWidth) {
  const v1::GetJobResponse job = TopJob();
  for (absl::string_view line : absl::StrSplit(RenderTop(job, job.ranks(), 40), '\n')) {
    EXPECT_LE(line.size(), 40u) << line;
  }
}

}  // namespace
}  // namespace ringmaster::ctl
