// The job manager's view of checkpoints (job_manager_checkpoints.cc): failed saves as a counter
// and throttled events, the commit that ends them, what a restart lost of what was trained, and
// the series RingmasterCheckpointMissing reads.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kFull[] =
    "RESOURCE_EXHAUSTED: create /ckpt/step-%08d/rank-%05d.bin.tmp.4242: No space left on device";

v1::JobSpec CheckpointingSpec() {
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_restart()->set_max_restarts(3);
  return spec;
}

v1::CheckpointFailure Failure(const v1::JobStatus& job, int rank, int64_t step, int consecutive,
                              const std::string& error = "") {
  v1::CheckpointFailure f;
  *f.mutable_job() = Generation(job);
  f.set_rank(rank);
  f.set_step(step);
  f.set_consecutive_failures(consecutive);
  f.set_error(error.empty() ? absl::StrFormat(kFull, step, rank) : error);
  return f;
}

// A later summary of every rank: at `step`, newest checkpoint `checkpoint`.
void Progress(JobManager& jobs, const v1::JobStatus& gen, int64_t step, int64_t checkpoint) {
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s = Summary(gen, rank, step, 1, 1);
    s.set_checkpoint_step(checkpoint);
    jobs.OnStepSummary(s);
  }
}

// A full disk: every save fails on both ranks. Each checkpoint counts once however many ranks
// report it; the events are the first, a change of error, and the 10th in a row (not the 2nd to
// 9th); a stale generation's report counts nothing; a commit ends the run of failures with an
// event, and the next failure is an event again.
TEST_F(JobManagerTest, FailedSavesAreCountedOnceAndTheirEventsThrottled) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(CheckpointingSpec(), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->job_id();
  const std::string counter =
      absl::StrCat("ringmaster_job_checkpoint_failures_total{job_id=\"", id, "\"}");
  EXPECT_EQ(SeriesValue(registry_.RenderText(), counter), 0) << "exported from the start";
  const v1::JobStatus gen1 = Current(id);
  StartTwoRanks(*jobs_, clock_.Now(), gen1, 0, 5, -1);

  for (int64_t step = 10; step <= 100; step += 10) {
    for (int rank : {1, 0}) jobs_->OnCheckpointFailure(Failure(gen1, rank, step, step / 10));
  }
  EXPECT_EQ(SeriesValue(registry_.RenderText(), counter), 10);
  std::vector<v1::JobEvent> failed = EventsOf(*jobs_->Get(id), "checkpoint_failed");
  ASSERT_EQ(failed.size(), 2u);  // the 1st and the 10th
  EXPECT_EQ(failed[0].step(), 10);
  EXPECT_THAT(failed[0].ranks(), ::testing::ElementsAre(1));
  EXPECT_EQ(failed[0].message(),
            "checkpoint at step 10 in /ckpt could not be saved: rank 1: RESOURCE_EXHAUSTED: "
            "create /ckpt/step-00000010/rank-00001.bin.tmp.4242: No space left on device. 1 save "
            "failed since the job's start (no checkpoint committed yet); training goes on "
            "(checkpoint.max_consecutive_failures is 0). Failures of the same kind are events at "
            "the 10th, 100th, ... in a row; ringmaster_job_checkpoint_failures_total counts them "
            "all");
  EXPECT_EQ(failed[1].step(), 100);
  EXPECT_THAT(failed[1].message(), HasSubstr(". 10 saves failed since the job's start"));

  // Another kind of error is an event at once; a stale generation's report is nothing.
  jobs_->OnCheckpointFailure(
      Failure(gen1, 0, 110, 11, "UNAVAILABLE: cannot create /ckpt/step-00000110: I/O error"));
  v1::JobStatus stale = gen1;
  stale.set_generation(gen1.generation() - 1);
  jobs_->OnCheckpointFailure(Failure(stale, 0, 120, 12));
  failed = EventsOf(*jobs_->Get(id), "checkpoint_failed");
  ASSERT_EQ(failed.size(), 3u);
  EXPECT_THAT(failed[2].message(), HasSubstr("rank 0: UNAVAILABLE: cannot create"));
  EXPECT_EQ(SeriesValue(registry_.RenderText(), counter), 11);

  // The disk has room again: the commit at step 120 ends the failures.
  Progress(*jobs_, gen1, 121, 120);
  std::vector<v1::JobEvent> committed = EventsOf(*jobs_->Get(id), "checkpoint");
  ASSERT_EQ(committed.size(), 1u);
  EXPECT_EQ(committed[0].step(), 120);
  EXPECT_EQ(committed[0].message(),
            "checkpoint at step 120 committed after 11 saves that failed (the last at step 110: "
            "UNAVAILABLE: cannot create /ckpt/step-00000110: I/O error)");
  jobs_->OnCheckpointFailure(Failure(gen1, 0, 130, 1));
  failed = EventsOf(*jobs_->Get(id), "checkpoint_failed");
  ASSERT_EQ(failed.size(), 4u);
  EXPECT_THAT(failed[3].message(),
              HasSubstr("1 save failed since the newest committed checkpoint (step 120)"));
  EXPECT_EQ(SeriesValue(registry_.RenderText(), counter), 12);
  ASSERT_TRUE(jobs_->Cancel(id, "", alice_).ok());
  EXPECT_THAT(registry_.RenderText(), Not(HasSubstr(counter))) << "removed with the job";
}

// The policy is the trainer's to enforce; the event says it, with the generation's count.
TEST_F(JobManagerTest, TheFailureEventStatesThePolicy) {
  AddNode("n1", 2);
  v1::JobSpec spec = CheckpointingSpec();
  spec.mutable_checkpoint()->set_max_consecutive_failures(3);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  jobs_->OnCheckpointFailure(Failure(Current(job->job_id()), 0, 10, 1));
  const std::vector<v1::JobEvent> failed =
      EventsOf(*jobs_->Get(job->job_id()), "checkpoint_failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_THAT(failed[0].message(),
              HasSubstr("the job fails after 3 in a row in one generation "
                        "(checkpoint.max_consecutive_failures; this generation has had 1)"));
}

// Generation 1 trains to step 1658 while every save fails; a kill restarts it from step 0. The
// "recovered" event of generation 2 says how many trained steps were lost, and why. Generation
// 3, after a commit, resumes from it: the event names the checkpoint.
TEST_F(JobManagerTest, ARestartSaysHowManyTrainedStepsWereLostAndWhy) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(CheckpointingSpec(), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->job_id();
  const v1::JobStatus gen1 = Current(id);
  StartTwoRanks(*jobs_, clock_.Now(), gen1, 0, 1, -1);
  for (int64_t step = 10; step <= 120; step += 10) {
    jobs_->OnCheckpointFailure(Failure(gen1, 1, step, step / 10));
  }
  Progress(*jobs_, gen1, 1600, -1);
  // The killed rank's agent had heard of step 1658 (its summary had not said it yet).
  v1::WorkerState killed = Exit(gen1, 1, -1, 9);
  killed.set_step(1658);
  jobs_->OnWorkerState("n1", killed);
  const v1::JobStatus gen2 = Current(id);
  ASSERT_EQ(gen2.generation(), 2);
  clock_.Advance(absl::Seconds(1));
  // Generation 2's first save fails before its rank 0's first summary arrives: the event is
  // about what generation 1 lost, not this.
  jobs_->OnCheckpointFailure(Failure(gen2, 1, 10, 1, "UNAVAILABLE: unrelated"));
  StartTwoRanks(*jobs_, clock_.Now(), gen2, 0, 1, -1);
  std::vector<v1::JobEvent> recovered = EventsOf(*jobs_->Get(id), "recovered");
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_THAT(recovered[0].message(),
              HasSubstr("; resumed from step 0: 1658 trained steps lost (no checkpoint was ever "
                        "committed: 12 saves failed, the last at step 120: RESOURCE_EXHAUSTED: "
                        "create /ckpt/step-00000120/rank-00001.bin.tmp.4242: No space left on "
                        "device)"));

  // Generation 2 commits step 40 and trains to 47; generation 3 resumes from 40.
  Progress(*jobs_, gen2, 47, 40);
  jobs_->OnWorkerState("n1", Exit(gen2, 0, 75));
  const v1::JobStatus gen3 = Current(id);
  ASSERT_EQ(gen3.generation(), 3);
  clock_.Advance(absl::Seconds(1));
  StartTwoRanks(*jobs_, clock_.Now(), gen3, 40, 41, 40);
  recovered = EventsOf(*jobs_->Get(id), "recovered");
  ASSERT_EQ(recovered.size(), 2u);
  EXPECT_THAT(recovered[1].message(),
              HasSubstr("; resumed from step 40: 7 trained steps lost (the steps since the "
                        "newest checkpoint, at step 40 (one every 10 steps))"));
}

// Nothing was lost: no such words.
TEST_F(JobManagerTest, ARestartFromWhereTheJobWasLosesNothing) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(CheckpointingSpec(), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::JobStatus gen1 = Current(job->job_id());
  StartTwoRanks(*jobs_, clock_.Now(), gen1, 0, 20, 20);
  jobs_->OnWorkerState("n1", Exit(gen1, 0, 75));
  const v1::JobStatus gen2 = Current(job->job_id());
  clock_.Advance(absl::Seconds(1));
  StartTwoRanks(*jobs_, clock_.Now(), gen2, 20, 21, 20);
  const std::vector<v1::JobEvent> recovered = EventsOf(*jobs_->Get(job->job_id()), "recovered");
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_THAT(recovered[0].message(), Not(HasSubstr("lost")));
}

// A job with periodic checkpoints has its checkpoint series from the start, before any
// checkpoint: step 0 and the steps trained since (what RingmasterCheckpointMissing compares with
// the interval). A job without checkpoints has none.
TEST_F(JobManagerTest, CheckpointSeriesExistBeforeTheFirstCheckpoint) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(CheckpointingSpec(), "", alice_);
  auto plain = jobs_->Submit(Spec(1, 2), "", alice_);
  ASSERT_TRUE(job.ok() && plain.ok()) << job.status() << plain.status();
  const std::string label = absl::StrCat("{job_id=\"", job->job_id(), "\"}");
  const v1::JobStatus gen1 = Current(job->job_id());
  StartTwoRanks(*jobs_, clock_.Now(), gen1, 0, 35, -1);
  StartTwoRanks(*jobs_, clock_.Now(), Current(plain->job_id()), 0, 35, -1);
  clock_.Advance(absl::Seconds(2));
  jobs_->Tick();
  std::string page = registry_.RenderText();
  EXPECT_EQ(SeriesValue(page, "ringmaster_job_checkpoint_step" + label), 0) << page;
  EXPECT_EQ(SeriesValue(page, "ringmaster_job_steps_since_checkpoint" + label), 35);
  EXPECT_EQ(SeriesValue(page, "ringmaster_job_checkpoint_interval_steps" + label), 10);
  EXPECT_THAT(page, Not(HasSubstr(absl::StrCat("ringmaster_job_steps_since_checkpoint{job_id=\"",
                                               plain->job_id()))));
  Progress(*jobs_, gen1, 42, 40);
  clock_.Advance(absl::Seconds(2));
  jobs_->Tick();
  page = registry_.RenderText();
  EXPECT_EQ(SeriesValue(page, "ringmaster_job_checkpoint_step" + label), 40);
  EXPECT_EQ(SeriesValue(page, "ringmaster_job_steps_since_checkpoint" + label), 2);
}

}  // namespace
}  // namespace ringmaster::coordinator
