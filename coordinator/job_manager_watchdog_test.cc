// JobManager's watch over running generations (the shared fixture is in
// job_manager_test_fixture.h): hang reports and which rank a hang blames, stragglers, each rank's
// progress, link checks and the slow or corrupting links they name, the timing of a recovery's
// phases, and a generation that resumes behind the newest checkpoint.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A one-node job of `tensor` x `pipeline` ranks, without data parallelism (4 microbatches).
v1::JobSpec WithoutDataParallelism(int tensor, int pipeline) {
  v1::JobSpec spec = Spec(1, tensor * pipeline);
  spec.mutable_parallelism()->set_tensor(tensor);
  spec.mutable_parallelism()->set_pipeline(pipeline);
  spec.mutable_parallelism()->set_data(1);
  spec.mutable_trainer()->mutable_batch()->set_global_batch(4);
  return spec;
}

TEST_F(JobManagerTest, HangReportNamesTheRankAndRestarts) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  v1::WorkerState phase_change = Exit(gen1, 1, 0);
  phase_change.set_phase(v1::WORKER_PHASE_STEP);  // No silence: not a hang.
  jobs_->OnWorkerState("n1", phase_change);
  EXPECT_EQ(Current(job->job_id()).generation(), 1);

  v1::WorkerState hung = phase_change;
  hung.set_last_report_age_seconds(12.5);
  jobs_->OnWorkerState("n1", hung);
  auto after = jobs_->Get(job->job_id());
  EXPECT_EQ(after->job().generation(), 2);
  EXPECT_EQ(after->job().state(), v1::JOB_STATE_RUNNING);
  bool named = false;
  for (const auto& e : after->events()) {
    if (e.kind() == "hang" && e.ranks_size() == 1 && e.ranks(0) == 1 &&
        e.message() == "rank 1 on n1 made no progress for 12.5 s in phase step: hung") {
      named = true;
    }
  }
  EXPECT_TRUE(named);
  EXPECT_NE(
      registry_.RenderText().find("ringmaster_job_hangs_total{job_id=\"" + job->job_id() + "\"} 1"),
      std::string::npos);
}

// A hang report in a phase this coordinator does not know (a newer agent's) is still a hang,
// named by the phase's number.
TEST_F(JobManagerTest, AHangInAPhaseThisCoordinatorDoesNotKnowIsNamedByNumber) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::WorkerState hung = HangReport(Current(job->job_id()), 1, 12.5);
  hung.set_phase(static_cast<v1::WorkerPhase>(42));
  jobs_->OnWorkerState("n1", hung);
  auto after = jobs_->Get(job->job_id());
  EXPECT_EQ(after->job().generation(), 2);
  std::vector<v1::JobEvent> hangs = EventsOf(*after, "hang");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].message(),
            "rank 1 on n1 made no progress for 12.5 s in phase unknown (42): hung");
}

// Rank 0 of `gen` (on n1) is reported blocked 20 s, before its first step, in a collective that
// did not move: the hang blames rank 1 with `blame` and the job restarts.
void ExpectWaitBeforeTheFirstStepBlamesRankOne(JobManager& jobs, const v1::JobStatus& gen,
                                               const std::string& blame) {
  v1::WorkerState hung = HangReport(gen, 0, 20);
  hung.set_phase(v1::WORKER_PHASE_STARTING);
  hung.set_blocked_in_collective(true);
  jobs.OnWorkerState("n1", hung);
  auto got = jobs.Get(gen.job_id());
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<v1::JobEvent> hangs = EventsOf(*got, "hang");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(hangs[0].ranks(), ElementsAre(1));
  EXPECT_EQ(hangs[0].message(),
            "rank 0 on n1 waited 20.0 s, before its first step, in a collective that did not "
            "move: hung; " + blame);
  EXPECT_EQ(got->job().generation(), 2);
}

// Before any step: rank 0's agent reports it blocked in a collective that did not move (a
// command rank under the Python watch), and the sequence numbers name rank 1, which has not
// entered it (a data loader stuck before the first batch).
TEST_F(JobManagerTest, AWaitInACollectiveBeforeTheFirstStepBlamesTheRankNotInIt) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  for (const auto& [rank, entered] : std::map<int, int64_t>{{0, 3}, {1, 0}}) {
    v1::StepSummary s = Summary(gen1, rank, 0, entered, 0, 0);  // collectives only, no step
    s.set_steps_in_summary(0);
    jobs_->OnStepSummary(s);
  }
  ExpectWaitBeforeTheFirstStepBlamesRankOne(
      *jobs_, gen1,
      "rank 1 has not entered collective #3 of dp0 (it is at #0) that rank 0 waits in");
}

// The stalled ranks' stacks: GetJob shows each rank's latest one (cleared when its summary says
// ""; left as is when the summary carries none), and the hang adds a "stack" event for the blamed
// rank only (rank 0, which waits, is not the news).
TEST_F(JobManagerTest, TheBlamedRanksStackFollowsTheHang) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  const std::map<int, std::string> stacks = {
      {0, "train.py:30 in <module>\ntrain.py:22 in main\n"
          "torch/distributed/distributed_c10d.py:1536 in all_reduce"},
      {1, "train.py:30 in <module>\ntrain.py:18 in main\nqueue.py:171 in get"}};
  for (const auto& [rank, entered] : std::map<int, int64_t>{{0, 3}, {1, 0}}) {
    v1::StepSummary s = Summary(gen1, rank, 0, entered, 0, 0);
    s.set_steps_in_summary(0);
    s.set_stack(stacks.at(rank));
    jobs_->OnStepSummary(s);
  }
  auto shown = [&] {
    std::map<int, std::string> out;
    auto got = jobs_->Get(job->job_id());
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return out;
    for (const v1::RankLiveState& r : got->ranks()) {
      if (!r.stack().empty()) out[r.rank()] = r.stack();
    }
    return out;
  };
  EXPECT_EQ(shown(), stacks);
  // A summary without a stack leaves it; one with "" clears it; one too long is not kept.
  v1::StepSummary s = Summary(gen1, 0, 0, 3, 0, 0);
  s.set_steps_in_summary(0);
  jobs_->OnStepSummary(s);
  EXPECT_EQ(shown(), stacks);
  s.set_stack("");
  jobs_->OnStepSummary(s);
  EXPECT_EQ(shown(), (std::map<int, std::string>{{1, stacks.at(1)}}));
  s.set_stack(std::string(4097, 'x'));  // the agents' bound is 4096 bytes
  jobs_->OnStepSummary(s);
  EXPECT_EQ(shown(), (std::map<int, std::string>{{1, stacks.at(1)}}));
  s.set_stack(stacks.at(0));
  jobs_->OnStepSummary(s);
  EXPECT_EQ(shown(), stacks);

  ExpectWaitBeforeTheFirstStepBlamesRankOne(
      *jobs_, gen1,
      "rank 1 has not entered collective #3 of dp0 (it is at #0) that rank 0 waits in");
  auto after = jobs_->Get(job->job_id());
  ASSERT_TRUE(after.ok()) << after.status();
  std::vector<v1::JobEvent> where = EventsOf(*after, "stack");
  ASSERT_EQ(where.size(), 1u);
  EXPECT_THAT(where[0].ranks(), ElementsAre(1));
  EXPECT_EQ(where[0].generation(), 1);
  EXPECT_EQ(where[0].message(),
            "rank 1 on n1, where its Python training thread stalled (innermost last): "
            "train.py:30 in <module> > train.py:18 in main > queue.py:171 in get");
  // The next generation starts with none; a rank that finished shows none.
  ASSERT_EQ(after->job().state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(after->ranks_size(), 2);
  EXPECT_TRUE(shown().empty());
  const v1::JobStatus gen2 = Current(job->job_id());
  s = Summary(gen2, 0, 0, 3, 0, 0);
  s.set_steps_in_summary(0);
  s.set_stack(stacks.at(0));
  jobs_->OnStepSummary(s);
  EXPECT_EQ(shown(), (std::map<int, std::string>{{0, stacks.at(0)}}));
  jobs_->OnWorkerState("n1", Exit(gen2, 0, 0));
  EXPECT_TRUE(shown().empty());
  jobs_->OnStepSummary(s);  // a late one, sent before the exit was known
  EXPECT_TRUE(shown().empty());
}

// Before any step, rank 1 never called init_process_group: ranks 0, 2 and 3 of a 4-rank job say
// they wait in its rendezvous. Rank 0 falls silent there (torch 1.13 holds the GIL while its store
// waits for the workers) while ranks 2 and 3 keep reporting for 20 s. Rank 1 first sends
// `rank1_stack` (a summary with no numbers: its watch's stack before init_process_group) unless
// it is empty. Returns the job's generation 1.
v1::JobStatus WaitInTheRendezvousForRankOne(JobManager& jobs, FakeClock& clock,
                                            const std::string& job_id,
                                            const std::string& rank1_stack) {
  const v1::JobStatus gen1 = jobs.Get(job_id)->job();
  auto summary = [&](int rank) {
    v1::StepSummary s;
    *s.mutable_job() = Generation(gen1);
    s.set_rank(rank);
    return s;
  };
  auto rendezvous = [&](int rank) {
    v1::StepSummary s = summary(rank);
    (*s.mutable_collective_entered())["rendezvous"] = 1;
    (*s.mutable_collective_completed())["rendezvous"] = 0;
    jobs.OnStepSummary(s);
  };
  if (!rank1_stack.empty()) {
    v1::StepSummary stuck = summary(1);
    stuck.set_stack(rank1_stack);
    jobs.OnStepSummary(stuck);
  }
  rendezvous(0);
  for (int second = 0; second < 20; ++second) {
    clock.Advance(absl::Seconds(1));
    for (int rank : {2, 3}) rendezvous(rank);
  }
  return gen1;
}

// Nothing heard of rank 1: it is named, not rank 0.
TEST_F(JobManagerTest, AWaitInInitProcessGroupBlamesTheRankThatNeverCalledIt) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  ExpectWaitBeforeTheFirstStepBlamesRankOne(
      *jobs_, WaitInTheRendezvousForRankOne(*jobs_, clock_, job->job_id(), ""),
      "rank 1 has not reached init_process_group's rendezvous that ranks 0, 2, 3 wait in");
}

// Rank 1's watch sent where it is stuck before init_process_group, then it fell silent (a C
// extension holding the GIL): still named as the rank that has not reached the rendezvous, not
// as a process that stopped reporting, and the hang quotes its stack.
TEST_F(JobManagerTest, ARankHeardOfOnlyByItsStackBeforeInitIsNamedAsNotAtTheRendezvous) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  ExpectWaitBeforeTheFirstStepBlamesRankOne(
      *jobs_,
      WaitInTheRendezvousForRankOne(*jobs_, clock_, job->job_id(),
                                    "train.py:90 in <module>\ntrain.py:12 in download"),
      "rank 1 has not reached init_process_group's rendezvous that ranks 0, 2, 3 wait in");
  std::vector<v1::JobEvent> where = EventsOf(*jobs_->Get(job->job_id()), "stack");
  ASSERT_EQ(where.size(), 1u);
  EXPECT_THAT(where[0].message(), HasSubstr("train.py:90 in <module> > train.py:12 in download"));
}

// Rank 1's watch disabled itself (its summary says unwatched) and it trains on, silent: a later
// hang is not blamed on it as a process that stopped reporting.
TEST_F(JobManagerTest, ARankWhoseWatchEndedIsNotASilentProcess) {
  AddNode("n1", 3);
  auto job = jobs_->Submit(Spec(1, 3), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  for (int rank = 0; rank < 3; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  v1::StepSummary ended = Summary(gen1, 1, 4, 8, 7);
  ended.set_steps_in_summary(0);
  ended.set_unwatched(true);
  ended.clear_collective_entered();
  ended.clear_collective_completed();
  jobs_->OnStepSummary(ended);
  for (int second = 0; second < 5; ++second) {
    clock_.Advance(absl::Seconds(1));
    for (int rank : {0, 2}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  }
  jobs_->OnWorkerState("n1", HangReport(gen1, 0, 5));
  for (int second = 0; second < 5; ++second) {
    clock_.Advance(absl::Seconds(1));
    jobs_->Tick();
  }
  std::vector<v1::JobEvent> hangs = EventsOf(*jobs_->Get(job->job_id()), "hang");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_THAT(hangs[0].ranks(), ElementsAre(0));  // no evidence: the reported rank
  EXPECT_THAT(hangs[0].message(), Not(HasSubstr("stopped reporting"))) << hangs[0].message();
}

// The agents stop the hung generation; the blamed rank's exit says what it was doing.
TEST_F(JobManagerTest, TheBlamedRanksExitIsQuotedOnceAfterTheHang) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus gen1 = Current(job->job_id());
  jobs_->OnWorkerState("n1", HangReport(gen1, 1, 12.5));
  ASSERT_EQ(Current(job->job_id()).generation(), 2);
  EXPECT_TRUE(EventsOf(*jobs_->Get(job->job_id()), "suspect_exit").empty());

  // Rank 0 was not blamed: its exit says nothing.
  v1::WorkerState peer = Exit(gen1, 0, -1, 15);
  peer.set_exit_reason("last output before the stop: step 4 loss 3.2");
  jobs_->OnWorkerState("n1", peer);
  EXPECT_TRUE(EventsOf(*jobs_->Get(job->job_id()), "suspect_exit").empty());
  v1::WorkerState blamed = Exit(gen1, 1, -1, 15);
  blamed.set_exit_reason("last output before the stop: waiting for shard 7\n");
  jobs_->OnWorkerState("n1", blamed);
  jobs_->OnWorkerState("n1", blamed);  // a replay (the agent's registration) changes nothing

  auto after = jobs_->Get(job->job_id());
  std::vector<v1::JobEvent> quoted = EventsOf(*after, "suspect_exit");
  ASSERT_EQ(quoted.size(), 1u);
  EXPECT_EQ(quoted[0].message(),
            "blamed for the hang: rank 1 on n1 was killed by signal 15: last output before the "
            "stop: waiting for shard 7");
  EXPECT_EQ(quoted[0].generation(), 1);
  ASSERT_EQ(quoted[0].ranks_size(), 1);
  EXPECT_EQ(quoted[0].ranks(0), 1);
  // The relaunched generation runs on, untouched by its predecessor's exits.
  EXPECT_EQ(after->job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(after->job().generation(), 2);
  EXPECT_EQ(after->job().restarts(), 1);
  // An exit of the new generation's rank 1 is a failure of its own, not a quote.
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 1, 1));
  EXPECT_EQ(EventsOf(*jobs_->Get(job->job_id()), "suspect_exit").size(), 1u);
  EXPECT_EQ(jobs_->Get(job->job_id())->job().state(), v1::JOB_STATE_FAILED);
}

TEST_F(JobManagerTest, HangNamesTheRankThatNeverEnteredTheCollectiveItsGroupWaitsIn) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  // Ranks 0, 1, 3 entered all-reduce #8 and wait; rank 2 stopped after #7.
  for (int rank : {0, 1, 3}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  jobs_->OnStepSummary(Summary(gen1, 2, 4, 7, 7));
  // Rank 0's agent reports it silent first: the event still names rank 2.
  v1::WorkerState hung = HangReport(gen1, 0, 11);
  jobs_->OnWorkerState("n1", hung);
  auto after = jobs_->Get(job->job_id());
  std::vector<v1::JobEvent> hangs = EventsOf(*after, "hang");
  ASSERT_EQ(hangs.size(), 1u);
  ASSERT_EQ(hangs[0].ranks_size(), 1);
  EXPECT_EQ(hangs[0].ranks(0), 2);
  EXPECT_NE(hangs[0].message().find("rank 2 has not entered collective #8 of dp0 (it is at #7) "
                                    "that ranks 0, 1, 3 wait in"),
            std::string::npos)
      << hangs[0].message();
  const std::string suspect =
      "ringmaster_hang_suspect{job_id=\"" + job->job_id() + "\",rank=\"2\"} 1";
  EXPECT_NE(registry_.RenderText().find(suspect), std::string::npos) << registry_.RenderText();
  EXPECT_EQ(after->job().generation(), 2);

  // Generation 2 recovers within a fraction of a scrape interval: the suspect stays visible
  // for 5 minutes after that, so that Prometheus sees it, then goes.
  v1::JobStatus gen2 = Current(job->job_id());
  for (int rank = 0; rank < 4; ++rank) {
    v1::StepSummary s = Summary(gen2, rank, 5, 1, 1);
    s.set_process_start_unix_nanos(absl::ToUnixNanos(clock_.Now()));
    s.set_first_step_seconds(0.1);
    jobs_->OnStepSummary(s);
  }
  ASSERT_EQ(EventsOf(*jobs_->Get(job->job_id()), "recovered").size(), 1u);
  clock_.Advance(absl::Minutes(4));
  jobs_->Tick();
  EXPECT_NE(registry_.RenderText().find(suspect), std::string::npos);
  clock_.Advance(absl::Minutes(1));
  jobs_->Tick();
  EXPECT_EQ(registry_.RenderText().find("ringmaster_hang_suspect{"), std::string::npos);
}

TEST_F(JobManagerTest, HangNamesTheRankWhoseProcessStoppedReportingWhenNoneLags) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  // Everyone entered #8 (rank 2 was stopped inside it): the numbers name nobody...
  for (int rank = 0; rank < 4; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  // ...but rank 2's process went quiet while the others keep reporting.
  for (int second = 0; second < 5; ++second) {
    clock_.Advance(absl::Seconds(1));
    for (int rank : {0, 1, 3}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  }
  v1::WorkerState hung = HangReport(gen1, 3, 5);
  jobs_->OnWorkerState("n1", hung);
  std::vector<v1::JobEvent> hangs = EventsOf(*jobs_->Get(job->job_id()), "hang");
  ASSERT_EQ(hangs.size(), 1u);
  ASSERT_EQ(hangs[0].ranks_size(), 1);
  EXPECT_EQ(hangs[0].ranks(0), 2);
  EXPECT_NE(hangs[0].message().find("rank 2's process stopped reporting 5.0 s ago"),
            std::string::npos)
      << hangs[0].message();
  // The relaunched generation's rank 2 is marked until the suspects' series go.
  auto relaunched = jobs_->Get(job->job_id());
  ASSERT_EQ(relaunched->job().state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(relaunched->ranks_size(), 4);
  EXPECT_TRUE(relaunched->ranks(2).hang_suspect());
  EXPECT_FALSE(relaunched->ranks(1).hang_suspect());
}

TEST_F(JobManagerTest, AnEarlyHangReportWaitsForTheStoppedProcessToFallSilent) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  // Rank 2 is stopped inside #8 right after its last summary; the others keep reporting.
  for (int rank = 0; rank < 4; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  clock_.Advance(absl::Seconds(1));
  for (int rank : {0, 1, 3}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  // A 1.5 s hang_timeout: rank 0's agent reports it before rank 2 has been silent long enough
  // to tell it from a live process, and the numbers name nobody. No verdict yet.
  v1::WorkerState hung = HangReport(gen1, 0, 1.5);
  jobs_->OnWorkerState("n1", hung);
  hung.set_rank(1);
  jobs_->OnWorkerState("n1", hung);  // a second report while the first waits changes nothing
  jobs_->Tick();
  EXPECT_TRUE(EventsOf(*jobs_->Get(job->job_id()), "hang").empty());
  EXPECT_EQ(Current(job->job_id()).generation(), 1);
  // Once rank 2 is silent for more than 2.5 s while the others report, the verdict names it.
  int ticks = 0;
  while (EventsOf(*jobs_->Get(job->job_id()), "hang").empty() && ticks < 20) {
    clock_.Advance(absl::Milliseconds(500));
    for (int rank : {0, 1, 3}) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
    jobs_->Tick();
    ++ticks;
  }
  EXPECT_EQ(ticks, 4);  // 3 s after rank 2's last summary
  std::vector<v1::JobEvent> hangs = EventsOf(*jobs_->Get(job->job_id()), "hang");
  ASSERT_EQ(hangs.size(), 1u);
  ASSERT_EQ(hangs[0].ranks_size(), 1);
  EXPECT_EQ(hangs[0].ranks(0), 2);
  EXPECT_NE(hangs[0].message().find("rank 0 on n1 made no progress for 1.5 s in phase step: "
                                    "hung; rank 2's process stopped reporting 3.0 s ago"),
            std::string::npos)
      << hangs[0].message();
  EXPECT_EQ(Current(job->job_id()).generation(), 2);
  EXPECT_NE(registry_.RenderText().find("ringmaster_hang_suspect{job_id=\"" + job->job_id() +
                                        "\",rank=\"2\"} 1"),
            std::string::npos);
}

TEST_F(JobManagerTest, AnEarlyHangReportWithNoEvidenceNamesTheReportedRankAfterTheWait) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(Spec(1, 4), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  // Every rank waits inside #8 and every process keeps reporting (a deadlock in the library).
  for (int rank = 0; rank < 4; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
  v1::WorkerState hung = HangReport(gen1, 1, 1);
  jobs_->OnWorkerState("n1", hung);
  int ticks = 0;
  while (EventsOf(*jobs_->Get(job->job_id()), "hang").empty() && ticks < 20) {
    clock_.Advance(absl::Milliseconds(500));
    for (int rank = 0; rank < 4; ++rank) jobs_->OnStepSummary(Summary(gen1, rank, 4, 8, 7));
    jobs_->Tick();
    ++ticks;
  }
  EXPECT_EQ(ticks, 6);  // 4 s after the hang began, 1 s before the report
  std::vector<v1::JobEvent> hangs = EventsOf(*jobs_->Get(job->job_id()), "hang");
  ASSERT_EQ(hangs.size(), 1u);
  ASSERT_EQ(hangs[0].ranks_size(), 1);
  EXPECT_EQ(hangs[0].ranks(0), 1);
  EXPECT_EQ(hangs[0].message(), "rank 1 on n1 made no progress for 1.0 s in phase step: hung");
  EXPECT_EQ(Current(job->job_id()).generation(), 2);
}

// A generation that resumes from an older step than the job's newest committed checkpoint (rank
// 0 could not read the newer ones: damaged, or on storage its node does not see) says so in an
// event and a counter; one that resumes from the newest does not.
TEST_F(JobManagerTest, AResumeBehindTheNewestCheckpointIsAnEventAndACounter) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_max_restarts(3);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  const std::string counter = absl::StrCat(
      "ringmaster_job_resumes_behind_checkpoint_total{job_id=\"", job->job_id(), "\"} ");
  EXPECT_NE(registry_.RenderText().find(counter + "0\n"), std::string::npos)
      << registry_.RenderText();
  const v1::JobStatus gen1 = Current(job->job_id());
  StartTwoRanks(*jobs_, clock_.Now(), gen1, 0, 200, 200);  // a checkpoint at step 200 committed
  jobs_->OnWorkerState(gen1.assignments(0).node(), Exit(gen1, 0, 75));
  const v1::JobStatus gen2 = Current(job->job_id());
  StartTwoRanks(*jobs_, clock_.Now(), gen2, 200, 201, 200);  // resumed from it
  EXPECT_TRUE(EventsOf(*jobs_->Get(job->job_id()), "resumed_behind").empty());
  EXPECT_NE(registry_.RenderText().find(counter + "0\n"), std::string::npos);

  jobs_->OnWorkerState(gen2.assignments(0).node(), Exit(gen2, 0, 75));
  const v1::JobStatus gen3 = Current(job->job_id());
  StartTwoRanks(*jobs_, clock_.Now(), gen3, 0, 1, -1);  // from scratch
  std::vector<v1::JobEvent> behind = EventsOf(*jobs_->Get(job->job_id()), "resumed_behind");
  ASSERT_EQ(behind.size(), 1u);
  EXPECT_EQ(behind[0].message(),
            "generation 3 started from step 0, but the job had committed a checkpoint at step "
            "200: 200 steps are trained again. Rank 0 could not use the newer checkpoints (its "
            "log says why); a checkpoint.dir that not every node sees is a common cause");
  EXPECT_NE(registry_.RenderText().find(counter + "1\n"), std::string::npos)
      << registry_.RenderText();
  // Only rank 0's first summary of a generation counts: later ones change nothing.
  StartTwoRanks(*jobs_, clock_.Now(), gen3, 0, 2, -1);
  EXPECT_EQ(EventsOf(*jobs_->Get(job->job_id()), "resumed_behind").size(), 1u);
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  EXPECT_EQ(registry_.RenderText().find(counter), std::string::npos) << "removed with the job";
}

// The newest checkpoint is stored with the job: after a coordinator restart, a generation that
// starts over is still caught. A command job's program need not say where it resumed (its
// start_step stays 0), so its restarts are not judged.
TEST_F(JobManagerTest, AResumeBehindIsCaughtAfterACoordinatorRestartAndNotForCommandJobs) {
  AddNode("n1", 4);
  v1::JobSpec builtin = Spec(1, 2), command = Spec(1, 2);
  builtin.mutable_restart()->set_max_restarts(3);
  command.mutable_restart()->set_max_restarts(3);
  command.mutable_trainer()->mutable_command()->add_argv("/bin/train");
  // Keys only the builtin trainer reads are refused for a command job.
  command.mutable_trainer()->clear_model();
  command.mutable_trainer()->clear_batch();
  command.mutable_trainer()->clear_optimizer();
  auto a = jobs_->Submit(builtin, "", alice_);
  auto b = jobs_->Submit(command, "", alice_);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  const v1::JobStatus a1 = Current(a->job_id()), b1 = Current(b->job_id());
  StartTwoRanks(*jobs_, clock_.Now(), a1, 0, 100, 100);
  StartTwoRanks(*jobs_, clock_.Now(), b1, 0, 100, 100);

  MakeManager();  // a coordinator restart: new managers over the same store
  v1::Register both = Returning("n1", 4, a1, {0, 1});
  const v1::Register b_workers = Returning("n1", 4, b1, {0, 1});
  for (const v1::WorkerState& w : b_workers.running_workers()) *both.add_running_workers() = w;
  Reconnect(both);
  jobs_->OnWorkerState("n1", Exit(a1, 0, 75));
  jobs_->OnWorkerState("n1", Exit(b1, 0, 75));
  const v1::JobStatus a2 = Current(a->job_id()), b2 = Current(b->job_id());
  ASSERT_EQ(a2.generation(), a1.generation() + 1);
  ASSERT_EQ(b2.generation(), b1.generation() + 1);
  StartTwoRanks(*jobs_, clock_.Now(), a2, 0, 100, -1);
  StartTwoRanks(*jobs_, clock_.Now(), b2, 0, 100, -1);
  std::vector<v1::JobEvent> behind = EventsOf(*jobs_->Get(a->job_id()), "resumed_behind");
  ASSERT_EQ(behind.size(), 1u);
  EXPECT_NE(behind[0].message().find("committed a checkpoint at step 100: 100 steps"),
            std::string::npos)
      << behind[0].message();
  EXPECT_TRUE(EventsOf(*jobs_->Get(b->job_id()), "resumed_behind").empty());
}

// TP 2 x PP 2 (no data parallelism): a rank is compared with its tensor-parallel peer, the
// other rank of its stage, and not with the other stage's ranks, which run other layers.
TEST_F(JobManagerTest, StragglersAreJudgedAmongTheRanksOfTheirPipelineStage) {
  AddNode("n1", 4);
  auto job = jobs_->Submit(WithoutDataParallelism(2, 2), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::JobStatus gen1 = Current(job->job_id());
  ASSERT_EQ(gen1.assignments_size(), 4);
  int slow = -1;
  std::map<int, double> seconds;  // by rank: the first stage 0.1 s, the second 0.3 s
  for (const v1::RankAssignment& a : gen1.assignments()) {
    seconds[a.rank()] = a.pp_rank() == 0 ? 0.1 : 0.3;
    if (a.pp_rank() == 1 && a.tp_rank() == 1) slow = a.rank();
  }
  ASSERT_GE(slow, 0);
  seconds[slow] = 0.45;
  for (int step = 1; step <= 12; ++step) {
    for (const auto& [rank, s] : seconds) {
      jobs_->OnStepSummary(Summary(gen1, rank, step, 2 * step, 2 * step, s));
    }
  }
  std::vector<v1::JobEvent> flagged = EventsOf(*jobs_->Get(job->job_id()), "straggler");
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].ranks(0), slow);
  EXPECT_NE(flagged[0].message().find(absl::StrCat("rank ", slow,
                                                   " on n1 computes 1.50x the median of the "
                                                   "other ranks of pipeline stage 1")),
            std::string::npos)
      << flagged[0].message();
}

// A pure pipeline (PP 2, nothing else): each stage has one rank, and stages run different layers,
// so a rank is judged by its slowdown (its level over its own after warm-up) against the other
// stage's. Rank 1 computing 1.5x what it did is flagged; rank 0, steady at a third of rank 1's
// time, is not.
TEST_F(JobManagerTest, TheOnlyRankOfAStageIsComparedWithItself) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(WithoutDataParallelism(1, 2), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::JobStatus gen1 = Current(job->job_id());
  ASSERT_EQ(gen1.assignments_size(), 2);
  ASSERT_EQ(gen1.assignments(1).pp_rank(), 1);
  for (int step = 1; step <= 40; ++step) {
    jobs_->OnStepSummary(Summary(gen1, 0, step, 2 * step, 2 * step, 0.1));
    jobs_->OnStepSummary(Summary(gen1, 1, step, 2 * step, 2 * step, step <= 20 ? 0.3 : 0.45));
  }
  std::vector<v1::JobEvent> flagged = EventsOf(*jobs_->Get(job->job_id()), "straggler");
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].ranks(0), 1);
  EXPECT_THAT(flagged[0].message(),
              HasSubstr("rank 1 on n1 slowed down 1.50x more than the other pipeline stages "
                        "(each against its own earlier compute time; the only rank of stage 1) "
                        "(threshold 1.20)"));
}

// A one-rank job has nobody to single out: slowing down is not a straggler.
TEST_F(JobManagerTest, AOneRankJobIsNeverAStraggler) {
  AddNode("n1", 1);
  auto job = jobs_->Submit(Spec(1, 1), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::JobStatus gen1 = Current(job->job_id());
  ASSERT_EQ(gen1.state(), v1::JOB_STATE_RUNNING);
  for (int step = 1; step <= 40; ++step) {
    jobs_->OnStepSummary(Summary(gen1, 0, step, 2 * step, 2 * step, step <= 20 ? 0.1 : 0.3));
  }
  EXPECT_TRUE(EventsOf(*jobs_->Get(job->job_id()), "straggler").empty());
}

TEST_F(JobManagerTest, StragglerIsFlaggedWithAnEventAndAMetricWithoutRestart) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(1, 2), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  for (int step = 1; step <= 12; ++step) {
    jobs_->OnStepSummary(Summary(gen1, 0, step, 2 * step, 2 * step, 0.10));
    jobs_->OnStepSummary(Summary(gen1, 1, step, 2 * step, 2 * step, 0.15));
  }
  auto after = jobs_->Get(job->job_id());
  std::vector<v1::JobEvent> flagged = EventsOf(*after, "straggler");
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].ranks(0), 1);
  EXPECT_NE(flagged[0].message().find("rank 1 on n1 computes 1.50x the median of the other "
                                      "ranks of pipeline stage 0 (threshold 1.20) at step 9: "
                                      "straggler"),
            std::string::npos)
      << flagged[0].message();
  EXPECT_EQ(after->job().generation(), 1);  // no restart
  EXPECT_NE(registry_.RenderText().find("ringmaster_straggler{job_id=\"" + job->job_id() +
                                        "\",rank=\"1\"} 1"),
            std::string::npos);
  ASSERT_EQ(after->ranks_size(), 2);  // and `ringctl describe` says so
  EXPECT_TRUE(after->ranks(1).straggler());
  EXPECT_NEAR(after->ranks(1).compute_ratio(), 1.5, 1e-9);
  EXPECT_FALSE(after->ranks(0).straggler());
  // Back to normal: cleared, the series stays at 0 until the job ends.
  for (int step = 13; step <= 40; ++step) {
    jobs_->OnStepSummary(Summary(gen1, 0, step, 2 * step, 2 * step, 0.10));
    jobs_->OnStepSummary(Summary(gen1, 1, step, 2 * step, 2 * step, 0.10));
  }
  after = jobs_->Get(job->job_id());
  ASSERT_EQ(EventsOf(*after, "straggler").size(), 2u);
  EXPECT_NE(registry_.RenderText().find("ringmaster_straggler{job_id=\"" + job->job_id() +
                                        "\",rank=\"1\"} 0"),
            std::string::npos);
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  EXPECT_EQ(registry_.RenderText().find("ringmaster_straggler{"), std::string::npos);
}

// A straggler whose wait for its next batch makes most of its excess compute is called
// input-bound; one whose input wait is a small part of it is not.
TEST_F(JobManagerTest, AStragglerWaitingForItsInputIsSaidToBe) {
  AddNode("n1", 2);
  for (const auto& [input, said] :
       std::vector<std::pair<double, bool>>{{0.045, true}, {0.01, false}}) {
    auto job = jobs_->Submit(Spec(1, 2), "", alice_);
    ASSERT_TRUE(job.ok());
    const v1::JobStatus gen1 = Current(job->job_id());
    for (int step = 1; step <= 12; ++step) {
      v1::StepSummary fast = Summary(gen1, 0, step, 2 * step, 2 * step, 0.10);
      fast.set_mean_input_seconds(0.001);
      jobs_->OnStepSummary(fast);
      v1::StepSummary slow = Summary(gen1, 1, step, 2 * step, 2 * step, 0.15);
      slow.set_mean_input_seconds(input);
      jobs_->OnStepSummary(slow);
    }
    std::vector<v1::JobEvent> flagged = EventsOf(*jobs_->Get(job->job_id()), "straggler");
    ASSERT_EQ(flagged.size(), 1u);
    const std::string cause =
        "straggler; mostly waiting for input: 45 ms per step for its next batch (DataLoader), "
        "its peers 1 ms";
    if (said) {
      EXPECT_TRUE(absl::EndsWith(flagged[0].message(), cause)) << flagged[0].message();
    } else {
      EXPECT_TRUE(absl::EndsWith(flagged[0].message(), "at step 9: straggler"))
          << flagged[0].message();
    }
    ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  }
}

// A rank that finished is no peer to compare input waits with: rank 2, done early after long
// waits for its input, would have put its peers' median at 25.5 ms, under what makes rank 1's
// 45 ms the cause; without it the median is rank 0's 1 ms.
TEST_F(JobManagerTest, AFinishedRanksInputWaitIsNoLongerCompared) {
  AddNode("n1", 3);
  auto job = jobs_->Submit(Spec(1, 3), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus gen1 = Current(job->job_id());
  auto summary = [&](int rank, int step, double compute, double input) {
    v1::StepSummary s = Summary(gen1, rank, step, 2 * step, 2 * step, compute);
    s.set_mean_input_seconds(input);
    jobs_->OnStepSummary(s);
  };
  summary(2, 1, 0.10, 0.05);
  jobs_->OnWorkerState("n1", Exit(gen1, 2, 0));
  for (int step = 1; step <= 12; ++step) {
    summary(0, step, 0.10, 0.001);
    summary(1, step, 0.15, 0.045);
  }
  std::vector<v1::JobEvent> flagged = EventsOf(*jobs_->Get(job->job_id()), "straggler");
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_THAT(flagged[0].message(), HasSubstr("mostly waiting for input: 45 ms per step for its "
                                              "next batch (DataLoader), its peers 1 ms"));
}

TEST_F(JobManagerTest, ARunningJobsRanksSayTheirStepAndWhenTheyWereLastHeardOf) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(1, 2), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  jobs_->OnStepSummary(Summary(running, 0, 7, 7, 7));
  clock_.Advance(absl::Milliseconds(2500));
  auto got = jobs_->Get(job->job_id());
  ASSERT_EQ(got->ranks_size(), 2);
  EXPECT_EQ(got->ranks(0).rank(), 0);
  EXPECT_EQ(got->ranks(0).step(), 7);
  EXPECT_DOUBLE_EQ(got->ranks(0).last_report_age_seconds(), 2.5);
  EXPECT_EQ(got->ranks(1).step(), 0);
  EXPECT_EQ(got->ranks(1).last_report_age_seconds(), -1);  // never heard of
  EXPECT_FALSE(got->ranks(1).finished());
  jobs_->OnWorkerState("n1", Exit(running, 1, 0));
  got = jobs_->Get(job->job_id());
  EXPECT_TRUE(got->ranks(1).finished());
  EXPECT_FALSE(got->ranks(1).hang_suspect());
  // Only a running job has them.
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  EXPECT_EQ(jobs_->Get(job->job_id())->ranks_size(), 0);
}

// Rank `rank`'s link check: its dp0 ring neighbours (in a ring of `world`), at `gbps[edge]` GB/s
// for the edge between ranks edge and edge+1.
v1::LinkReport Links(const v1::JobStatus& job, int rank, int world, const std::vector<double>& gbps,
                     double seconds = 0.05) {
  v1::LinkReport r;
  *r.mutable_job() = Generation(job);
  r.set_rank(rank);
  r.set_seconds(seconds);
  for (const int edge : {rank, (rank + world - 1) % world}) {
    v1::LinkStat* l = r.add_links();
    l->set_group("dp0");
    l->set_peer_rank(edge == rank ? (rank + 1) % world : edge);
    l->set_bytes(4 << 20);
    l->set_seconds((4 << 20) / (gbps[edge] * 1e9));
  }
  return r;
}

TEST_F(JobManagerTest, ASlowLinkIsNamedWithItsRanksAndNodesOnceEveryRankReported) {
  const TwoNodeJob job = RunOnTwoNodes();
  ASSERT_FALSE(job.id.empty());
  const v1::JobStatus& running = job.running;
  const std::vector<std::string>& node = job.node;
  ASSERT_EQ(node[0], node[1]);
  ASSERT_EQ(node[2], node[3]);
  ASSERT_NE(node[1], node[2]);
  // Edges 0-1 and 2-3 inside a node, 1-2 and 3-0 across; 1-2 is slow.
  const std::vector<double> gbps = {20, 0.1, 20, 2};
  for (int rank = 0; rank < 3; ++rank) jobs_->OnLinkReport(Links(running, rank, 4, gbps));
  jobs_->OnLinkReport(Links(running, 2, 4, {9, 9, 9, 9}));  // a repeat: ignored
  auto partial = jobs_->Get(job.id);
  EXPECT_EQ(partial->link_check().ranks_reported(), 3);
  EXPECT_EQ(partial->link_check().ranks_expected(), 4);
  EXPECT_TRUE(EventsOf(*partial, "slow_link").empty());  // judged once all reported

  jobs_->OnLinkReport(Links(running, 3, 4, gbps));
  auto got = jobs_->Get(job.id);
  const v1::LinkCheckSummary& check = got->link_check();
  EXPECT_EQ(check.generation(), running.generation());
  EXPECT_EQ(check.ranks_reported(), 4);
  ASSERT_EQ(check.slow_size(), 1) << check.DebugString();
  EXPECT_EQ(check.slow(0).rank(), 1);
  EXPECT_EQ(check.slow(0).peer_rank(), 2);
  EXPECT_EQ(check.slow(0).node(), node[1]);
  EXPECT_EQ(check.slow(0).peer_node(), node[2]);
  const std::vector<v1::JobEvent> slow = EventsOf(*got, "slow_link");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_THAT(slow[0].ranks(), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(slow[0].message(),
            absl::StrCat("dp0: rank 1 (", node[1], ") <-> rank 2 (", node[2],
                         "): 0.10 GB/s each way, 0.05x the median of the other dp links "
                         "across nodes (2.00 GB/s): slow (threshold 0.50x)"));
  std::string page = registry_.RenderText();
  EXPECT_NEAR(SeriesValue(page, absl::StrCat("ringmaster_slow_link{job_id=\"", job.id,
                                             "\",group=\"dp0\",rank=\"1\",peer_rank=\"2\","
                                             "node=\"",
                                             node[1], "\",peer_node=\"", node[2], "\"}")),
              0.05, 1e-9)
      << page;
  const std::string bandwidth = absl::StrCat("ringmaster_link_bandwidth_bytes_per_second{job_id=\"",
                                             job.id, "\",kind=\"dp\",");
  EXPECT_NEAR(SeriesValue(page, bandwidth + "scope=\"inter_node\",stat=\"min\"}"), 1e8, 1) << page;
  EXPECT_NEAR(SeriesValue(page, bandwidth + "scope=\"inter_node\",stat=\"median\"}"), 1.05e9, 1);
  EXPECT_NEAR(SeriesValue(page, bandwidth + "scope=\"intra_node\",stat=\"median\"}"), 2e10, 10);

  // The next generation's verdict replaces the series: its links are all fine.
  jobs_->OnWorkerState(node[0], Exit(running, 0, 75));
  const v1::JobStatus gen2 = Current(job.id);
  ASSERT_EQ(gen2.generation(), running.generation() + 1);
  EXPECT_EQ(jobs_->Get(job.id)->link_check().ranks_reported(), 0);
  EXPECT_FALSE(jobs_->Get(job.id)->has_link_check());
  jobs_->OnLinkReport(Links(running, 0, 4, gbps));  // the old generation's: ignored
  EXPECT_FALSE(jobs_->Get(job.id)->has_link_check());
  for (int rank = 0; rank < 4; ++rank) jobs_->OnLinkReport(Links(gen2, rank, 4, {20, 2, 20, 2}));
  EXPECT_EQ(jobs_->Get(job.id)->link_check().slow_size(), 0);
  page = registry_.RenderText();
  EXPECT_EQ(page.find("ringmaster_slow_link{"), std::string::npos) << page;
  EXPECT_NE(page.find("ringmaster_link_bandwidth_bytes_per_second{"), std::string::npos);
  // The job's end removes them all.
  ASSERT_TRUE(jobs_->Cancel(job.id, "", alice_).ok());
  EXPECT_EQ(registry_.RenderText().find("ringmaster_link_bandwidth_bytes_per_second{"),
            std::string::npos);
}

TEST_F(JobManagerTest, ALinkThatCorruptsDataIsNamedEvenWithNothingToCompareItWith) {
  AddNode("n1", 1);
  AddNode("n2", 1);
  auto job = jobs_->Submit(Spec(2, 1), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  for (int rank = 0; rank < 2; ++rank) {
    v1::LinkReport r;
    *r.mutable_job() = Generation(running);
    r.set_rank(rank);
    v1::LinkStat* l = r.add_links();
    l->set_group("dp0");
    l->set_peer_rank(1 - rank);
    l->set_bytes(1000);
    l->set_seconds(1e-6);
    l->set_wrong(rank == 1 ? 3 : 0);
    v1::LinkStat* bogus = r.add_links();  // a peer outside the job: dropped
    *bogus = *l;
    bogus->set_peer_rank(7);
    jobs_->OnLinkReport(r);
  }
  auto got = jobs_->Get(job->job_id());
  ASSERT_EQ(got->link_check().slow_size(), 1);
  EXPECT_EQ(got->link_check().slow(0).wrong(), 3);
  const std::vector<v1::JobEvent> slow = EventsOf(*got, "slow_link");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_THAT(slow[0].message(),
              ::testing::EndsWith("1.00 GB/s each way; 3 elements arrived wrong: the link "
                                  "corrupts data"));
}

TEST_F(JobManagerTest, ARequestedLinkCheckGoesToRankZerosNodeAndItsResultReplacesTheStartOne) {
  const TwoNodeJob job = RunOnTwoNodes();
  ASSERT_FALSE(job.id.empty());
  const v1::JobStatus& running = job.running;
  // Only its owner or an admin may ask.
  EXPECT_EQ(jobs_->RequestLinkCheck(job.id, Caller{"mallory", false}).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(jobs_->RequestLinkCheck("nope", alice_).status().code(), absl::StatusCode::kNotFound);
  const std::vector<double> fine = {10, 2, 10, 2}, slow = {10, 0.1, 10, 2};
  for (int rank = 0; rank < 4; ++rank) jobs_->OnLinkReport(Links(running, rank, 4, fine, 0.2));
  // Not before the generation trains: rank 0 may not run yet.
  auto early = jobs_->RequestLinkCheck(job.id, alice_);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.status().message()), HasSubstr("has not completed a step yet"));
  jobs_->OnStepSummary(Summary(running, 0, 1, 1, 1));
  sink_.sent.clear();
  auto requested = jobs_->RequestLinkCheck(job.id, alice_);
  ASSERT_TRUE(requested.ok()) << requested.status();
  EXPECT_EQ(requested->job().job_id(), job.id);
  ASSERT_EQ(sink_.sent.size(), 1u);
  EXPECT_EQ(sink_.sent[0].first, running.assignments(0).node());
  ASSERT_TRUE(sink_.sent[0].second.has_check_links());
  EXPECT_EQ(sink_.sent[0].second.check_links().job().generation(), running.generation());
  EXPECT_EQ(sink_.sent[0].second.check_links().rank(), 0);
  // The check after step 40: its reports replace the start-up check's summary and series.
  for (int rank = 0; rank < 3; ++rank) {
    v1::LinkReport r = Links(running, rank, 4, slow, 0.3);
    r.set_step(40);
    jobs_->OnLinkReport(r);
  }
  v1::LinkReport old = Links(running, 3, 4, fine);  // a late start-up report: superseded
  jobs_->OnLinkReport(old);
  EXPECT_EQ(jobs_->Get(job.id)->link_check().ranks_reported(), 3);
  v1::LinkReport last = Links(running, 3, 4, slow, 0.3);
  last.set_step(40);
  jobs_->OnLinkReport(last);
  const auto got = jobs_->Get(job.id);
  EXPECT_EQ(got->link_check().step(), 40);
  ASSERT_EQ(got->link_check().slow_size(), 1);
  EXPECT_EQ(got->link_check().slow(0).rank(), 1);
  const std::vector<v1::JobEvent> checks = EventsOf(*got, "link_check");
  std::vector<std::string> messages;
  for (const v1::JobEvent& e : checks) messages.push_back(e.message());
  EXPECT_THAT(messages,
              ::testing::ElementsAre(
                  "link check requested by alice: the ranks run it after an upcoming step",
                  "link check after step 40: 4 links, 1 slow or corrupting"));
  // What ringctl check-links --wait reads: the request's event, then the verdict's step and the
  // ends of the link it names.
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].sequence(), requested->request_sequence());
  EXPECT_EQ(checks[0].step(), 0);
  EXPECT_EQ(checks[1].step(), 40);
  EXPECT_THAT(checks[1].ranks(), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(EventsOf(*got, "slow_link").size(), 1u);
  // Not running any more: refused.
  ASSERT_TRUE(jobs_->Cancel(job.id, "", alice_).ok());
  auto refused = jobs_->RequestLinkCheck(job.id, alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("is CANCELLED: only a running job's links can be checked"));
}

TEST_F(JobManagerTest, ALinkCheckCannotBeRequestedForAJobThatTurnedItOffOrHasOneRank) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec();
  spec.mutable_watchdog()->set_link_check_disabled(true);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  auto refused = jobs_->RequestLinkCheck(job->job_id(), alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("watchdog.link_check: false"));
  AddNode("n2", 1);
  auto single = jobs_->Submit(Spec(1, 1), "", alice_);
  ASSERT_TRUE(single.ok());
  refused = jobs_->RequestLinkCheck(single->job_id(), alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("has no link to check"));
}

// The rank that received wrong data exits at once (75), so the generation ends before the other
// ranks report: the corruption is named from that one report, and its series outlives the
// generation until the next one's check is complete.
TEST_F(JobManagerTest, ACorruptingLinkIsNamedBeforeItsRankExitsAndTheOthersReport) {
  const TwoNodeJob job = RunOnTwoNodes();
  ASSERT_FALSE(job.id.empty());
  const v1::JobStatus& running = job.running;
  const std::vector<std::string>& node = job.node;
  v1::LinkReport corrupt = Links(running, 2, 4, {10, 10, 10, 10});
  corrupt.mutable_links(1)->set_wrong(5);  // from rank 1
  jobs_->OnLinkReport(corrupt);
  jobs_->OnWorkerState(node[2], Exit(running, 2, 75));
  const auto got = jobs_->Get(job.id);
  ASSERT_EQ(got->job().generation(), running.generation() + 1);
  const std::vector<v1::JobEvent> named = EventsOf(*got, "slow_link");
  ASSERT_EQ(named.size(), 1u);
  EXPECT_THAT(named[0].ranks(), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(named[0].message(),
            absl::StrCat("dp0: rank 1 (", node[1], ") <-> rank 2 (", node[2],
                         "): 10.00 GB/s each way; 5 elements arrived wrong: the link corrupts "
                         "data"));
  const std::string series = absl::StrCat("ringmaster_slow_link{job_id=\"", job.id,
                                          "\",group=\"dp0\",rank=\"1\",peer_rank=\"2\",");
  EXPECT_NE(registry_.RenderText().find(series), std::string::npos);
  // Generation 2's links are fine: its verdict removes the series.
  const v1::JobStatus gen2 = got->job();
  for (int rank = 0; rank < 4; ++rank) jobs_->OnLinkReport(Links(gen2, rank, 4, {10, 10, 10, 10}));
  EXPECT_EQ(registry_.RenderText().find(series), std::string::npos);
  EXPECT_EQ(EventsOf(*jobs_->Get(job.id), "slow_link").size(), 1u);
}

TEST_F(JobManagerTest, RecoveryPhasesAreMeasuredOnceEveryRankOfTheNewGenerationStepped) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(1, 2), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::WorkerState killed = Exit(Current(job->job_id()), 1, -1, 9);
  killed.set_time_unix_nanos(absl::ToUnixNanos(clock_.Now() - absl::Milliseconds(100)));
  jobs_->OnWorkerState("n1", killed);
  v1::JobStatus gen2 = Current(job->job_id());
  ASSERT_EQ(gen2.generation(), 2);
  // The link check comes before the first step; the slowest rank's is the phase.
  jobs_->OnLinkReport(Links(gen2, 0, 2, {10, 10}, 0.1));
  jobs_->OnLinkReport(Links(gen2, 1, 2, {10, 10}, 0.25));
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s = Summary(gen2, rank, 21, 2, 2);
    s.set_process_start_unix_nanos(absl::ToUnixNanos(clock_.Now() + absl::Milliseconds(200)));
    s.set_rendezvous_seconds(0.3);
    s.set_restore_seconds(0.05);
    s.set_first_step_seconds(0.1);
    s.set_start_step(20);
    s.set_step_end_unix_nanos(absl::ToUnixNanos(clock_.Now() + absl::Seconds(1)));
    jobs_->OnStepSummary(s);
  }
  std::vector<v1::JobEvent> recovered = EventsOf(*jobs_->Get(job->job_id()), "recovered");
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_NE(recovered[0].message().find("recovery took 1.00 s: detect 0.10, place 0.00, stop "
                                        "0.20, rendezvous 0.30, link check 0.25, restore 0.05, "
                                        "first step 0.10"),
            std::string::npos)
      << recovered[0].message();
  jobs_->Tick();
  const std::string page = registry_.RenderText();
  EXPECT_NE(
      page.find("ringmaster_recovery_seconds{job_id=\"" + job->job_id() + "\",phase=\"total\"} 1"),
      std::string::npos)
      << page;
  EXPECT_NE(page.find("ringmaster_recovery_seconds{job_id=\"" + job->job_id() +
                      "\",phase=\"link_check\"} 0.25"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("ringmaster_goodput_ratio{job_id=\"" + job->job_id() + "\"}"),
            std::string::npos);
}

}  // namespace
}  // namespace ringmaster::coordinator
