// The checkpoint rule (hang_analysis.h) in the job manager: a command job's rank 0 saves a
// checkpoint alone (PyTorch's `if rank == 0: torch.save(...)`), evaluates, or works outside any
// collective, while rank 1 waits in the next collective beyond its step allowance: that is no
// hang. A rank stuck elsewhere meanwhile is still
// blamed by the sequence numbers, and a checkpoint that outlasts its own allowance is a hang.
#include <string>
#include <vector>

#include "coordinator/job_manager.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A Python command job of `ranks` ranks on one node, as a user's DDP script runs.
v1::JobSpec PythonJob(int ranks) {
  v1::JobSpec spec;
  spec.set_name("ddp");
  spec.set_nodes(1);
  spec.set_devices_per_node(ranks);
  spec.mutable_parallelism()->set_tensor(1);
  spec.mutable_parallelism()->set_pipeline(1);
  spec.mutable_parallelism()->set_data(ranks);
  spec.mutable_trainer()->mutable_command()->add_argv("python3");
  spec.mutable_trainer()->mutable_command()->add_argv("train.py");
  spec.mutable_restart()->set_max_restarts(1);
  return spec;
}

// What the Python watch's reports make of a rank, through its agent's summary: the default
// group's sequence numbers and the phase.
v1::StepSummary Watched(const v1::JobStatus& job, int rank, int64_t step, int64_t entered,
                        int64_t completed, v1::WorkerPhase phase) {
  v1::StepSummary s;
  s.mutable_job()->set_job_id(job.job_id());
  s.mutable_job()->set_generation(job.generation());
  s.set_rank(rank);
  s.set_step(step);
  s.set_phase(phase);
  (*s.mutable_collective_entered())["world"] = entered;
  (*s.mutable_collective_completed())["world"] = completed;
  return s;
}

class CheckpointHangTest : public JobManagerTest {
 protected:
  // Submits a Python job of `ranks` ranks, each of which completed step 10 (collective #41).
  v1::JobStatus StartAtStep10(int ranks) {
    AddNode("n1", ranks);
    auto job = jobs_->Submit(PythonJob(ranks), "", alice_);
    EXPECT_TRUE(job.ok()) << job.status();
    const v1::JobStatus gen = Current(job->job_id());
    for (int r = 0; r < ranks; ++r) {
      v1::StepSummary s = Watched(gen, r, 10, 41, 41, v1::WORKER_PHASE_STEP);
      s.set_steps_in_summary(1);
      s.set_mean_compute_seconds(0.2);
      jobs_->OnStepSummary(s);
    }
    return gen;
  }

  // `seconds` pass: rank 1, waiting inside #42, keeps sending its sequence numbers (the watch's
  // side thread); the other ranks send `others` (as they are at each second), or nothing (rank
  // 0 inside torch.save, say).
  void Wait(const v1::JobStatus& gen, int seconds,
            const std::vector<const v1::StepSummary*>& others = {}) {
    for (int s = 0; s < seconds; ++s) {
      clock_.Advance(absl::Seconds(1));
      jobs_->OnStepSummary(Watched(gen, 1, 10, 42, 41, v1::WORKER_PHASE_STEP));
      for (const v1::StepSummary* other : others) jobs_->OnStepSummary(*other);
      jobs_->Tick();
    }
  }

  std::vector<v1::JobEvent> Hangs(const v1::JobStatus& gen) {
    return EventsOf(*jobs_->Get(gen.job_id()), "hang");
  }
};

TEST_F(CheckpointHangTest, RankOneWaitingForRankZerosSaveIsNotHung) {
  const v1::JobStatus gen = StartAtStep10(2);
  // Rank 0 saves; rank 1 goes on into #42 and waits there.
  jobs_->OnStepSummary(Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_CHECKPOINT));
  Wait(gen, 10);
  // Rank 1's agent: silent beyond max(9 s, 5 x p99 step) in STEP.
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  for (int s = 0; s < 5; ++s) Wait(gen, 1);
  EXPECT_TRUE(Hangs(gen).empty()) << Hangs(gen)[0].message();
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation());
  EXPECT_EQ(Current(gen.job_id()).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(registry_.RenderText().find("ringmaster_hang_suspect{"), std::string::npos);

  // The save ends after 20 s; both complete #42 and step on.
  Wait(gen, 5);
  jobs_->OnStepSummary(Watched(gen, 0, 11, 42, 42, v1::WORKER_PHASE_STEP));
  jobs_->OnStepSummary(Watched(gen, 1, 11, 42, 42, v1::WORKER_PHASE_STEP));
  jobs_->Tick();
  EXPECT_TRUE(Hangs(gen).empty());
  EXPECT_EQ(Current(gen.job_id()).progress().step(), 11);

  // Later, rank 0 is stuck in a step (no checkpoint): rank 1's next report blames it.
  jobs_->OnStepSummary(Watched(gen, 1, 11, 43, 42, v1::WORKER_PHASE_STEP));
  Wait(gen, 10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(0));
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation() + 1);
}

// The same for a rank that evaluates alone (its program named the phase: ringmaster.worker's
// phase("eval")) while its peer waits in the next collective.
TEST_F(CheckpointHangTest, RankOneWaitingForRankZerosEvaluationIsNotHung) {
  const v1::JobStatus gen = StartAtStep10(2);
  jobs_->OnStepSummary(Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_EVAL));
  Wait(gen, 10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  for (int s = 0; s < 5; ++s) Wait(gen, 1);
  EXPECT_TRUE(Hangs(gen).empty()) << Hangs(gen)[0].message();
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation());
  // Its own agent reports it past its EVAL allowance: then it is the hang, named.
  v1::WorkerState evaluating = HangReport(gen, 0, 30);
  evaluating.set_phase(v1::WORKER_PHASE_EVAL);
  jobs_->OnWorkerState("n1", evaluating);
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(0));
}

// The same for a rank whose program names no phase but whose agent says it works outside any
// collective (StepSummary.working: its watch says so, and its training thread runs): rank 0
// evaluating alone. Once it stops working (stuck, not in a collective, its thread idle), the
// report set aside is judged again and rank 0 is blamed.
TEST_F(CheckpointHangTest, RankOneWaitingForRankZeroWorkingAloneIsNotHungUntilItStops) {
  const v1::JobStatus gen = StartAtStep10(2);
  v1::StepSummary rank0 = Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_STEP);
  rank0.set_working(true);
  auto both = [&](int seconds) { Wait(gen, seconds, {&rank0}); };
  jobs_->OnStepSummary(Watched(gen, 1, 10, 42, 41, v1::WORKER_PHASE_STEP));
  // Just sampled: no wait shown yet (a healthy job's ranks are sampled a moment apart).
  EXPECT_EQ(jobs_->Get(gen.job_id())->ranks(0).activity(), "stepping");
  EXPECT_EQ(jobs_->Get(gen.job_id())->ranks(1).activity(), "stepping");
  both(10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  both(30);
  EXPECT_TRUE(Hangs(gen).empty()) << Hangs(gen)[0].message();
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation());
  // `ringctl top` shows who waits and who holds them up (RankLiveState.activity).
  auto live = jobs_->Get(gen.job_id());
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_EQ(live->ranks_size(), 2);
  EXPECT_EQ(live->ranks(0).activity(), "behind world #42 (at #41), working");
  EXPECT_EQ(live->ranks(1).activity(), "in world #42");

  rank0.set_working(false);  // its thread stops: stuck outside any collective
  both(9);
  EXPECT_EQ(jobs_->Get(gen.job_id())->ranks(0).activity(), "behind world #42 (at #41)");
  EXPECT_TRUE(Hangs(gen).empty()) << Hangs(gen)[0].message();
  for (int s = 0; s < 10 && Hangs(gen).empty(); ++s) both(1);
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(0));
  EXPECT_THAT(hangs[0].message(),
              HasSubstr("rank 0 has not entered collective #42 of world (it is at #41)"));
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation() + 1);
}

// Rank 0 works alone, then stops working and both all-reduce batch after batch (a distributed
// evaluation, no step): rank 1's set-aside report is over once its numbers move, not judged
// again as if it were still waiting.
TEST_F(CheckpointHangTest, ASetAsideReportIsForgottenOnceTheWaitersNumbersMove) {
  const v1::JobStatus gen = StartAtStep10(2);
  v1::StepSummary rank0 = Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_STEP);
  rank0.set_working(true);
  for (int s = 0; s < 10; ++s) {
    clock_.Advance(absl::Seconds(1));
    jobs_->OnStepSummary(rank0);
    jobs_->OnStepSummary(Watched(gen, 1, 10, 42, 41, v1::WORKER_PHASE_STEP));
    jobs_->Tick();
  }
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  ASSERT_TRUE(Hangs(gen).empty()) << Hangs(gen)[0].message();
  for (int n = 42; n < 102; ++n) {  // a minute of gathering, rank 0 no longer "working"
    clock_.Advance(absl::Seconds(1));
    jobs_->OnStepSummary(Watched(gen, 0, 10, n + 1, n + 1, v1::WORKER_PHASE_STEP));
    jobs_->OnStepSummary(Watched(gen, 1, 10, n + 1, n, v1::WORKER_PHASE_STEP));
    jobs_->Tick();
  }
  EXPECT_TRUE(Hangs(gen).empty()) << Hangs(gen)[0].message();
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation());
}

// Rank 1 waits for rank 0, which works and then stops; rank 2 works on meanwhile (a wait the
// evidence does not name): rank 1's report is judged again once rank 0, the one it waits for,
// stops working, whatever rank 2 does.
TEST_F(CheckpointHangTest, ASetAsideReportWaitsOnlyForTheRanksItNamed) {
  const v1::JobStatus gen = StartAtStep10(3);
  v1::StepSummary rank0 = Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_STEP);
  rank0.set_working(true);
  v1::StepSummary rank2 = Watched(gen, 2, 10, 42, 42, v1::WORKER_PHASE_STEP);
  rank2.set_working(true);
  auto all = [&](int seconds) { Wait(gen, seconds, {&rank0, &rank2}); };
  all(10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  all(10);
  ASSERT_TRUE(Hangs(gen).empty()) << Hangs(gen)[0].message();
  rank0.set_working(false);
  for (int s = 0; s < 20 && Hangs(gen).empty(); ++s) all(1);
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(0));
}

// A rank that said it works and then fell silent (its process frozen) works no more: blamed.
TEST_F(CheckpointHangTest, ARankThatSaidItWorksAndFellSilentIsBlamed) {
  const v1::JobStatus gen = StartAtStep10(2);
  v1::StepSummary rank0 = Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_STEP);
  rank0.set_working(true);
  jobs_->OnStepSummary(rank0);
  Wait(gen, 10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  for (int s = 0; s < 5 && Hangs(gen).empty(); ++s) Wait(gen, 1);
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(0));
  EXPECT_THAT(hangs[0].message(), HasSubstr("rank 0's process stopped reporting"));
}

TEST_F(CheckpointHangTest, ARankStuckElsewhereWhileRankZeroSavesIsBlamedAlone) {
  const v1::JobStatus gen = StartAtStep10(3);
  jobs_->OnStepSummary(Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_CHECKPOINT));
  // Rank 2 never reaches #42 (a stuck data loader), and says nothing more.
  Wait(gen, 10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(2));
  EXPECT_THAT(hangs[0].message(), HasSubstr("rank 2's process stopped reporting"));
  EXPECT_THAT(hangs[0].message(), Not(HasSubstr("rank 0")));
  EXPECT_NE(registry_.RenderText().find("ringmaster_hang_suspect{job_id=\"" + gen.job_id() +
                                        "\",rank=\"2\"} 1"),
            std::string::npos);
}

TEST_F(CheckpointHangTest, ASaveThatOutlastsItsAllowanceIsAHang) {
  const v1::JobStatus gen = StartAtStep10(2);
  jobs_->OnStepSummary(Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_CHECKPOINT));
  Wait(gen, 10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  EXPECT_TRUE(Hangs(gen).empty());
  // Rank 0's own agent: silent in CHECKPOINT past --hang_checkpoint_timeout.
  Wait(gen, 20);
  v1::WorkerState stuck = HangReport(gen, 0, 30);
  stuck.set_phase(v1::WORKER_PHASE_CHECKPOINT);
  jobs_->OnWorkerState("n1", stuck);
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(0));
  EXPECT_THAT(hangs[0].message(), HasSubstr("rank 0 on n1 made no progress for 30.0 s in phase "
                                            "checkpoint: hung"));
}

// Rank 1's report (a short hang_timeout) waits for evidence when rank 0, stuck inside its save,
// is reported by its own agent: that report is decided too, not dropped, though rank 1's is set
// aside (each agent reports a rank once until it reports again).
TEST_F(CheckpointHangTest, ASaversReportWhileAWaitersIsHeldIsNotDropped) {
  const v1::JobStatus gen = StartAtStep10(2);
  jobs_->OnStepSummary(Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_CHECKPOINT));
  Wait(gen, 10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 2));  // held: it began 2 s ago
  EXPECT_TRUE(Hangs(gen).empty());
  v1::WorkerState stuck = HangReport(gen, 0, 30);
  stuck.set_phase(v1::WORKER_PHASE_CHECKPOINT);
  jobs_->OnWorkerState("n1", stuck);
  for (int s = 0; s < 5 && Hangs(gen).empty(); ++s) Wait(gen, 1);
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(0));
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation() + 1);
}

// Rank 1's report was set aside while rank 0 saved; rank 0 then stops right after its save,
// before the next collective. Rank 1's agent does not report it again (it never reported again),
// so the coordinator judges it again once it stays silent as long again: rank 0 is blamed.
TEST_F(CheckpointHangTest, ASetAsideReportIsJudgedAgainWhenTheRankStaysSilent) {
  const v1::JobStatus gen = StartAtStep10(2);
  jobs_->OnStepSummary(Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_CHECKPOINT));
  Wait(gen, 10);
  jobs_->OnWorkerState("n1", HangReport(gen, 1, 10));
  EXPECT_TRUE(Hangs(gen).empty());
  jobs_->OnStepSummary(Watched(gen, 0, 10, 41, 41, v1::WORKER_PHASE_STEP));  // the save ended
  Wait(gen, 9);
  EXPECT_TRUE(Hangs(gen).empty());
  for (int s = 0; s < 10 && Hangs(gen).empty(); ++s) Wait(gen, 1);
  std::vector<v1::JobEvent> hangs = Hangs(gen);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(std::vector<int>(hangs[0].ranks().begin(), hangs[0].ranks().end()),
              ElementsAre(0));
  EXPECT_THAT(hangs[0].message(), HasSubstr("rank 0's process stopped reporting"));
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation() + 1);
}

// Before the first step: rank 1's agent reports it blocked in #2 while rank 0 writes a
// checkpoint (the report is set aside). The save ends, both complete #2, and rank 1 computes on
// without a step (a long first forward): its wait is over, so the report is forgotten rather
// than judged again once the rank has been quiet as long again.
TEST_F(CheckpointHangTest, ASetAsideWaitBeforeTheFirstStepIsForgottenOnceItsNumbersMove) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(PythonJob(2), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::JobStatus gen = Current(job->job_id());
  jobs_->OnStepSummary(Watched(gen, 0, 0, 1, 1, v1::WORKER_PHASE_CHECKPOINT));
  for (int s = 0; s < 30; ++s) {
    clock_.Advance(absl::Seconds(1));
    jobs_->OnStepSummary(Watched(gen, 1, 0, 2, 1, v1::WORKER_PHASE_UNSPECIFIED));
    jobs_->Tick();
  }
  v1::WorkerState hung = HangReport(gen, 1, 30);
  hung.set_phase(v1::WORKER_PHASE_STARTING);
  hung.set_blocked_in_collective(true);
  jobs_->OnWorkerState("n1", hung);
  EXPECT_TRUE(Hangs(gen).empty());
  jobs_->OnStepSummary(Watched(gen, 0, 0, 2, 2, v1::WORKER_PHASE_STEP));  // the save ended
  for (int s = 0; s < 120; ++s) {
    clock_.Advance(absl::Seconds(1));
    jobs_->OnStepSummary(Watched(gen, 0, 0, 2, 2, v1::WORKER_PHASE_STEP));
    jobs_->OnStepSummary(Watched(gen, 1, 0, 2, 2, v1::WORKER_PHASE_UNSPECIFIED));
    jobs_->Tick();
  }
  EXPECT_TRUE(Hangs(gen).empty()) << Hangs(gen)[0].message();
  EXPECT_EQ(Current(gen.job_id()).generation(), gen.generation());
}

}  // namespace
}  // namespace ringmaster::coordinator
