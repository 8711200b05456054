// JobManager's jobs from submission to their end (the shared fixture is in
// job_manager_test_fixture.h): validation, scheduling, success, failures and restarts, cancel,
// crash-loop backoff, fatal exits, excluded and lost nodes. The records kept of them (listing,
// events, watch, the store's writes, retention, series) are in job_manager_records_test.cc.
#include "coordinator/job_manager.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;

TEST_F(JobManagerTest, InvalidSpecIsRefusedNamingTheField) {
  v1::JobSpec spec = Spec();
  spec.mutable_parallelism()->set_data(3);
  auto job = jobs_->Submit(spec, "", alice_);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("parallelism"), std::string::npos) << job.status();
  EXPECT_TRUE(jobs_->List({}, 0)->jobs.empty());
}

// The planner judges layouts against the smallest GPU the live nodes' agents registered (CPU
// slots have no memory to judge by), and says where the figure comes from.
TEST_F(JobManagerTest, ThePlannerKnowsTheRegisteredGpusMemory) {
  auto reasons = [&] {
    absl::StatusOr<v1::PlanJobResponse> plan = jobs_->Plan(Spec());
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? absl::StrJoin(plan->plan().reasons(), "\n") : std::string();
  };
  AddNode("cpu", 2);
  EXPECT_NE(reasons().find("device memory unknown"), std::string::npos) << reasons();
  v1::Register gpus = NodeRegistration("gpus", 2);
  for (int i = 0; i < 2; ++i) {
    gpus.mutable_devices(i)->set_kind("gpu");
    gpus.mutable_devices(i)->set_memory_bytes(int64_t{i == 0 ? 80 : 40} << 30);
  }
  ASSERT_TRUE(nodes_->Register(gpus).ok());
  EXPECT_NE(reasons().find("device memory: 40.0 GiB per device (the smallest GPU of the "
                           "registered nodes)"),
            std::string::npos)
      << reasons();
  // A submitted job's stored plan says the same.
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_NE(absl::StrJoin(Current(job->job_id()).plan().reasons(), "\n").find("40.0 GiB"),
            std::string::npos);
  // A lost node's GPUs count no more.
  clock_.Advance(absl::Minutes(1));
  nodes_->CheckLiveness();
  EXPECT_NE(reasons().find("device memory unknown"), std::string::npos) << reasons();
}

TEST_F(JobManagerTest, PendingUntilCapacityThenRunningWithLaunches) {
  auto job = jobs_->Submit(Spec(2, 2), "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(job->reason().find("needs"), std::string::npos) << job->reason();
  AddNode("n1", 2);
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_PENDING);
  AddNode("n2", 2);
  v1::JobStatus running = Current(job->job_id());
  ASSERT_EQ(running.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(running.generation(), 1);
  EXPECT_EQ(running.assignments_size(), 4);
  EXPECT_EQ(running.reason(), "");
  auto launches = sink_.Launches();
  ASSERT_EQ(launches.size(), 2u);
  for (const auto& launch : launches) {
    EXPECT_EQ(launch.job().job_id(), job->job_id());
    EXPECT_EQ(launch.job().generation(), 1);
    EXPECT_EQ(launch.world_size(), 4);
    EXPECT_EQ(launch.assignments_size(), 2);
    EXPECT_EQ(launch.master_addr(), running.assignments(0).node() + ".local");
  }
  // The rendezvous store of generation 1 is open.
  EXPECT_TRUE(rendezvous_->Set(job->job_id(), 1, "k", "v").ok());
  EXPECT_NE(registry_.RenderText().find("ringmaster_jobs{state=\"running\"} 1"), std::string::npos);
}

// A retry with the same request id gets the same job; another caller's submission with that
// request id is refused, naming the field, rather than handed alice's job (and its environment)
// as its own, also after a restart (the store's request table).
TEST_F(JobManagerTest, RequestIdMakesSubmitIdempotent) {
  auto first = jobs_->Submit(Spec(), "req-1", alice_);
  auto second = jobs_->Submit(Spec(), "req-1", alice_);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->job_id(), second->job_id());
  EXPECT_EQ(jobs_->List({}, 0)->jobs.size(), 1u);
  const Caller bob{"bob", false};
  for (int restart = 0; restart < 2; ++restart) {
    if (restart == 1) MakeManager();  // a coordinator restart: new managers, same store
    auto taken = jobs_->Submit(Spec(), "req-1", bob);
    EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_THAT(taken.status().message(),
                HasSubstr("request_id: \"req-1\" already names another caller's job"));
    EXPECT_EQ(jobs_->List({}, 0)->jobs.size(), 1u);
  }
  EXPECT_EQ(jobs_->Submit(Spec(), "req-1", Caller{"ops", true}).status().code(),
            absl::StatusCode::kAlreadyExists)
      << "an admin's submission is its own too";
}

TEST_F(JobManagerTest, SucceedsWhenEveryRankExitsZero) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus running = Current(job->job_id());
  jobs_->OnWorkerState("n1", Exit(running, 0, 0));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_RUNNING);
  jobs_->OnWorkerState("n1", Exit(running, 1, 0));
  auto done = jobs_->Get(job->job_id());
  EXPECT_EQ(done->job().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(StatesOf(*done),
            (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING,
                                       v1::JOB_STATE_SUCCEEDED}));
  EXPECT_GT(done->job().end_time_unix_nanos(), 0);
  EXPECT_EQ(nodes_->FreeCapacity()[0].free.size(), 2u);  // Devices released.
}

// `ringctl top` and the live block read each rank's latest figures and the job's MFU from GetJob.
TEST_F(JobManagerTest, GetJobShowsEachRanksStepTimesComputeShareBusbwAndMfu) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus running = Current(job->job_id());
  for (int rank : {0, 1}) {
    v1::StepSummary s = Summary(running, rank, 3, 3, 3);
    s.set_step_seconds(0.5);
    s.set_compute_seconds(0.4);
    s.set_step_seconds_p50(0.5 + rank);
    s.set_step_seconds_p99(0.75 + rank);
    s.set_busbw_bytes_per_second(1e9 * (rank + 1));
    s.set_mfu(rank == 0 ? 0.2 : 0.4);
    jobs_->OnStepSummary(s);
  }
  const auto got = jobs_->Get(job->job_id());
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->ranks_size(), 2);
  const v1::RankLiveState& r1 = got->ranks(1);
  EXPECT_EQ(r1.step_seconds_p50(), 1.5);
  EXPECT_EQ(r1.step_seconds_p99(), 1.75);
  EXPECT_DOUBLE_EQ(r1.compute_share(), 0.8);
  EXPECT_EQ(r1.busbw_bytes_per_second(), 2e9);
  EXPECT_EQ(r1.mfu(), 0.4);
  EXPECT_DOUBLE_EQ(got->job().progress().mfu(), 0.3);  // the mean over the ranks
}

TEST_F(JobManagerTest, FailureRestartsWithANewGenerationThenFailsWhenRestartsRunOut) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::JobStatus gen1 = Current(job->job_id());
  jobs_->OnWorkerState("n1", Exit(gen1, 1, 0, /*signal=*/9));
  v1::JobStatus gen2 = Current(job->job_id());
  EXPECT_EQ(gen2.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(gen2.generation(), 2);
  EXPECT_EQ(gen2.restarts(), 1);
  auto stops = sink_.Stops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].second.job().generation(), 1);
  ASSERT_EQ(sink_.Launches().size(), 2u);
  EXPECT_EQ(sink_.Launches()[1].restart_count(), 1);
  // Generation 1's rendezvous is fenced off.
  EXPECT_EQ(rendezvous_->Set(job->job_id(), 1, "k", "v").code(),
            absl::StatusCode::kFailedPrecondition);
  // A late report from generation 1 changes nothing.
  jobs_->OnWorkerState("n1", Exit(gen1, 0, 1));
  EXPECT_EQ(Current(job->job_id()).generation(), 2);

  jobs_->OnWorkerState("n1", Exit(gen2, 0, 1));
  auto failed = jobs_->Get(job->job_id());
  EXPECT_EQ(failed->job().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(StatesOf(*failed),
            (std::vector<v1::JobState>{v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING,
                                       v1::JOB_STATE_RESTARTING, v1::JOB_STATE_RUNNING,
                                       v1::JOB_STATE_FAILED}));
  bool named_rank = false;
  for (const auto& e : failed->events()) {
    if (e.kind() == "worker_exit" && e.ranks_size() == 1 && e.ranks(0) == 1) named_rank = true;
  }
  EXPECT_TRUE(named_rank);
}

// Live jobs never share a MASTER_PORT: with 100 of them on one node, ports hashed into a range of
// 1000 would collide more often than not (two rank 0s listening on one port).
TEST_F(JobManagerTest, RunningJobsGetDistinctMasterPorts) {
  AddNode("n1", 100);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(jobs_->Submit(Spec(1, 1), "", alice_).ok());
  std::set<int> ports;
  for (const v1::LaunchWorkers& launch : sink_.Launches()) ports.insert(launch.master_port());
  EXPECT_EQ(sink_.Launches().size(), 100u);
  EXPECT_EQ(ports.size(), 100u);
}

// A spec that says nothing of restarts gets 3 (ApplyDefaults at submission): the job restarts
// from a failure instead of failing for good.
TEST_F(JobManagerTest, AJobWithoutARestartPolicyRestartsThreeTimes) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec();
  spec.clear_restart();
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().restart().max_restarts(), 3);
  for (int generation = 1; generation <= 3; ++generation) {
    const v1::JobStatus running = Current(job->job_id());
    ASSERT_EQ(running.generation(), generation);
    jobs_->OnWorkerState("n1", Exit(running, 0, 1));
  }
  const v1::JobStatus last = Current(job->job_id());
  EXPECT_EQ(last.generation(), 4);
  EXPECT_EQ(last.restarts(), 3);
  jobs_->OnWorkerState("n1", Exit(last, 0, 1));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_FAILED);
}

// restart.window_minutes: a restart older than the window no longer counts, so one restart
// allowed per hour lets a failure an hour later restart the job again, and a second failure
// inside the hour fail it. Each generation trains a step first (no crash-loop backoff).
TEST_F(JobManagerTest, OnlyTheRestartsInsideTheWindowCountAgainstTheLimit) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec();
  spec.mutable_restart()->set_max_restarts(1);
  spec.mutable_restart()->set_window_minutes(60);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok()) << job.status();
  auto fail_after_a_step = [&](int64_t step) {
    const v1::JobStatus running = Current(job->job_id());
    EXPECT_EQ(running.state(), v1::JOB_STATE_RUNNING);
    for (int rank : {0, 1}) jobs_->OnStepSummary(Summary(running, rank, step, step, step, 0.1));
    jobs_->OnWorkerState("n1", Exit(running, 1, 1));
  };
  auto messages = [&] {  // the state changes' events, one a line
    std::string all;
    const auto got = jobs_->Get(job->job_id());
    for (const v1::JobEvent& e : got->events()) {
      if (e.kind() == "state") absl::StrAppend(&all, e.message(), "\n");
    }
    return all;
  };
  fail_after_a_step(5);
  EXPECT_EQ(Current(job->job_id()).generation(), 2);
  EXPECT_THAT(messages(), HasSubstr("; restart 1 of 1 within 60 minutes (1 in all)\n"));

  clock_.Advance(absl::Minutes(61));
  fail_after_a_step(10);
  v1::JobStatus gen3 = Current(job->job_id());
  EXPECT_EQ(gen3.generation(), 3);
  EXPECT_EQ(gen3.restarts(), 2);
  EXPECT_EQ(gen3.counted_restart_unix_nanos_size(), 1);  // the first one left the window
  EXPECT_THAT(messages(), HasSubstr("; restart 1 of 1 within 60 minutes (2 in all)\n"));

  clock_.Advance(absl::Minutes(59));
  fail_after_a_step(15);
  auto failed = jobs_->Get(job->job_id());
  EXPECT_EQ(failed->job().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed->job().restarts(), 2);
  EXPECT_THAT(messages(), HasSubstr("(1 of 1 restarts used within 60 minutes)\n"));
}

// Why a rank failed, as its agent tells it, is in the worker_exit event and in the job's failure:
// on one line and bounded, whatever the agent sent.
TEST_F(JobManagerTest, AFailedRanksReasonIsInItsEventAndInTheJobsFailure) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  v1::WorkerState exit = Exit(Current(job->job_id()), 1, 75);
  exit.set_exit_reason("UNAVAILABLE: all_reduce on tp0: remote process exited");
  jobs_->OnWorkerState("n1", exit);
  v1::JobStatus restarted = Current(job->job_id());
  EXPECT_EQ(restarted.generation(), 2);

  exit = Exit(restarted, 0, -1, /*signal=*/6);
  exit.set_exit_reason("last output: terminate called\nafter throwing " + std::string(5000, 'x'));
  jobs_->OnWorkerState("n1", exit);
  auto failed = jobs_->Get(job->job_id());
  ASSERT_EQ(failed->job().state(), v1::JOB_STATE_FAILED);
  std::vector<std::string> messages;
  for (const auto& e : failed->events()) {
    if (e.kind() == "worker_exit") messages.push_back(e.message());
  }
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0],
            "rank 1 on n1 exited with code 75: UNAVAILABLE: all_reduce on tp0: remote process "
            "exited");
  const std::string prefix =
      "rank 0 on n1 was killed by signal 6: last output: terminate called after throwing xxx";
  EXPECT_EQ(messages[1].rfind(prefix, 0), 0u) << messages[1];
  // And the transition to FAILED says it too.
  const v1::JobEvent& last = failed->events(failed->events_size() - 1);
  EXPECT_EQ(last.message().rfind(prefix, 0), 0u) << last.message();
  EXPECT_EQ(messages[1].find('\n'), std::string::npos);
  EXPECT_LE(messages[1].size(), std::string("rank 0 on n1 was killed by signal 6: ").size() + 512);
  EXPECT_EQ(messages[1].substr(messages[1].size() - 3), "...");
}

// A generation is in the store before any agent is told to launch it: a coordinator that died
// right after the launch comes back knowing it, and adopts its workers instead of stopping them.
TEST_F(JobManagerTest, AGenerationIsStoredBeforeItsLaunchIsSent) {
  AddNode("n1", 2);
  std::vector<std::pair<int64_t, int64_t>> stored_at_launch;  // (launched, stored) generation
  sink_.on_send = [&](const std::string&, const v1::CoordinatorMessage& m) {
    if (!m.has_launch()) return;
    auto stored = store_->LoadAll();
    ASSERT_TRUE(stored.ok()) << stored.status();
    for (const StoredJob& j : *stored) {
      if (j.status.job_id() != m.launch().job().job_id()) continue;
      EXPECT_EQ(j.status.state(), v1::JOB_STATE_RUNNING);
      stored_at_launch.emplace_back(m.launch().job().generation(), j.status.generation());
    }
  };
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));  // restart: generation 2
  sink_.on_send = nullptr;
  EXPECT_EQ(stored_at_launch, (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 2}}));
}

// An agent's report about a rank the job does not have, or one placed on another node, changes
// nothing: not an exit, not a finished rank, not a hang.
TEST_F(JobManagerTest, ReportsAboutRanksThatAreNotTheReportingNodesAreIgnored) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus gen1 = Current(job->job_id());
  const std::string node = gen1.assignments(0).node(), other = node == "n1" ? "n2" : "n1";
  jobs_->OnWorkerState(node, Exit(gen1, 2, 1));   // no rank 2
  jobs_->OnWorkerState(node, Exit(gen1, -1, 1));  // nor -1
  jobs_->OnWorkerState(other, Exit(gen1, 0, 1));  // rank 0 is not on `other`
  jobs_->OnWorkerState(other, HangReport(gen1, 1, 30));
  jobs_->OnWorkerState(node, Exit(gen1, 7, 0));  // a "finished" rank that does not exist
  jobs_->OnWorkerState(node, Exit(gen1, 0, 0));
  v1::JobStatus now = Current(job->job_id());
  EXPECT_EQ(now.state(), v1::JOB_STATE_RUNNING);  // rank 1 has not finished
  EXPECT_EQ(now.generation(), 1);
  jobs_->OnWorkerState(node, Exit(gen1, 1, 0));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_SUCCEEDED);
}

// A restarted generation reports the checkpoint it resumed from: that is not a new checkpoint, so
// the job's newest-checkpoint time (RingmasterCheckpointStale's age) stays that of its commit.
TEST_F(JobManagerTest, ResumingFromACheckpointDoesNotMakeItNewer) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_max_restarts(3);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  const v1::JobStatus gen1 = Current(job->job_id());
  const std::string node = gen1.assignments(0).node();
  const std::string series = absl::StrCat(
      "ringmaster_job_last_checkpoint_timestamp_seconds{job_id=\"", job->job_id(), "\"} ");
  // The exported value; -1 without the series.
  auto timestamp = [&]() -> double {
    const std::string page = registry_.RenderText();
    const size_t at = page.find(series);
    double value = -1;
    if (at != std::string::npos) {
      const size_t from = at + series.size();
      EXPECT_TRUE(absl::SimpleAtod(page.substr(from, page.find('\n', from) - from), &value));
    }
    return value;
  };
  auto now = [&] { return absl::ToDoubleSeconds(clock_.Now() - absl::UnixEpoch()); };
  clock_.Advance(absl::Seconds(10));
  const double committed_at = now();
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s = Summary(gen1, rank, 200, 1, 1);
    s.set_checkpoint_step(200);
    jobs_->OnStepSummary(s);
  }
  jobs_->Tick();
  ASSERT_EQ(timestamp(), committed_at) << registry_.RenderText();

  jobs_->OnWorkerState(node, Exit(gen1, 0, 75));
  const v1::JobStatus gen2 = Current(job->job_id());
  ASSERT_EQ(gen2.generation(), gen1.generation() + 1);
  clock_.Advance(absl::Minutes(5));
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s = Summary(gen2, rank, 201, 1, 1);
    s.set_checkpoint_step(200);  // resumed from it
    jobs_->OnStepSummary(s);
  }
  jobs_->Tick();
  EXPECT_EQ(timestamp(), committed_at) << "the resumed checkpoint is not new";
  EXPECT_EQ(Current(job->job_id()).progress().checkpoint_step(), 200);

  clock_.Advance(absl::Seconds(30));
  v1::StepSummary newer = Summary(gen2, 0, 300, 2, 2);
  newer.set_checkpoint_step(300);
  jobs_->OnStepSummary(newer);
  jobs_->Tick();
  EXPECT_EQ(timestamp(), now());
}

TEST_F(JobManagerTest, ANodeThatFailedTwiceInARowIsExcludedWhileSpareCapacityExists) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_max_restarts(5);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  const std::string first = Current(job->job_id()).assignments(0).node();
  jobs_->OnWorkerState(first, Exit(Current(job->job_id()), 0, 1));
  // Best-fit places it on the same node again; a second failure there excludes it.
  v1::JobStatus gen2 = Current(job->job_id());
  ASSERT_EQ(gen2.assignments(0).node(), first);
  jobs_->OnWorkerState(first, Exit(gen2, 0, 1));
  v1::JobStatus gen3 = Current(job->job_id());
  EXPECT_EQ(gen3.generation(), 3);
  EXPECT_NE(gen3.assignments(0).node(), first);
  ASSERT_EQ(EventsOf(*jobs_->Get(job->job_id()), "exclude").size(), 1u);
}

TEST_F(JobManagerTest, AnExcludedNodeIsUsedWhenNothingElseFits) {
  AddNode("n1", 2);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_max_restarts(5);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));
  v1::JobStatus gen3 = Current(job->job_id());
  EXPECT_EQ(gen3.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(gen3.generation(), 3);
  EXPECT_EQ(gen3.assignments(0).node(), "n1");
}

// Generations that fail before their first step back off: the first relaunch is immediate, then
// 1 s, 2 s, 4 s (the maximum here), 4 s; a generation that steps resets it.
TEST_F(JobManagerTest, CrashLoopsBackOffUntilAGenerationSteps) {
  const std::string id = SubmitOnOneNode(absl::Seconds(1));
  ASSERT_FALSE(id.empty());
  // Fails generation `generation` before any step; returns how long its relaunch waited, in
  // whole seconds of the fake clock (Tick is the coordinator's 10 Hz ticker).
  auto fail_and_wait = [&](int64_t generation) {
    EXPECT_EQ(Current(id).generation(), generation);
    jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));
    int waited = 0;
    for (; Current(id).state() == v1::JOB_STATE_RESTARTING && waited < 10; ++waited) {
      EXPECT_THAT(Current(id).reason(), HasSubstr("crash loop"));
      clock_.Advance(absl::Seconds(1));
      jobs_->Tick();
    }
    EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
    EXPECT_EQ(Current(id).generation(), generation + 1);
    return waited;
  };
  EXPECT_EQ(fail_and_wait(1), 0);
  EXPECT_EQ(fail_and_wait(2), 1);
  // A summary without steps (a phase or collective report) is not progress.
  v1::StepSummary phase_only = Summary(Current(id), 0, 0, 1, 1);
  phase_only.set_steps_in_summary(0);
  jobs_->OnStepSummary(phase_only);
  EXPECT_EQ(fail_and_wait(3), 2);
  EXPECT_EQ(fail_and_wait(4), 4);
  EXPECT_EQ(fail_and_wait(5), 4);
  auto events = jobs_->Get(id);
  bool explained = false;
  for (const auto& e : events->events()) {
    if (absl::StrContains(e.message(),
                          "restart 3 of 10 in 2s (crash loop: 3 generations in a "
                          "row failed before their first step)")) {
      explained = true;
    }
  }
  EXPECT_TRUE(explained);
  // Generation 6 trains, then fails: relaunched at once, and the count starts again.
  jobs_->OnStepSummary(Summary(Current(id), 0, 10, 1, 1));
  EXPECT_EQ(fail_and_wait(6), 0);
  EXPECT_EQ(fail_and_wait(7), 0);
  EXPECT_EQ(fail_and_wait(8), 1);
}

TEST_F(JobManagerTest, ACrashLoopsBackoffSurvivesACoordinatorRestart) {
  const std::string id = SubmitOnOneNode(absl::Seconds(2));  // then 4 s, the most
  ASSERT_FALSE(id.empty());
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));  // relaunched at once
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));  // waits 2 s
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  clock_.Advance(absl::Seconds(1));

  MakeManager();  // the coordinator restarts; its node registers again
  AddNode("n1", 2);
  jobs_->Tick();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);
  clock_.Advance(absl::Seconds(1));
  jobs_->Tick();
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Current(id).generation(), 3);
  // The count of failures in a row goes on too: the third waits twice as long.
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));
  EXPECT_THAT(Current(id).reason(), HasSubstr("in 4s (crash loop: 3 generations"));
  // A generation that steps ends the loop, for good.
  MakeManager();
  AddNode("n1", 2);
  clock_.Advance(absl::Seconds(4));
  jobs_->Tick();
  ASSERT_EQ(Current(id).state(), v1::JOB_STATE_RUNNING);
  jobs_->OnStepSummary(Summary(Current(id), 0, 10, 1, 1));
  MakeManager();
  EXPECT_EQ(Current(id).failures_before_a_step(), 0);
  // That it stepped is stored too: its failure after the restart starts no count.
  Reconnect(Returning("n1", 2, Current(id), {0, 1}));
  const int64_t stepped = Current(id).generation();
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));
  EXPECT_EQ(Current(id).generation(), stepped + 1);
  EXPECT_EQ(Current(id).failures_before_a_step(), 0);
}

TEST_F(JobManagerTest, FatalExitCodeFailsWithoutRestart) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, kExitFatal));
  v1::JobStatus failed = Current(job->job_id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.restarts(), 0);
}

TEST_F(JobManagerTest, LostNodeRestartsTheJobElsewhere) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(Current(job->job_id()).assignments(0).node(), "n1");
  ASSERT_TRUE(nodes_->Register(NodeRegistration("n2", 2)).ok());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(nodes_->Register(NodeRegistration("n2", 2)).ok());  // n2 fresh, n1 silent.
  clock_.Advance(absl::Seconds(2));
  for (const std::string& lost : nodes_->CheckLiveness()) jobs_->OnNodeLost(lost);
  v1::JobStatus moved = Current(job->job_id());
  EXPECT_EQ(moved.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(moved.generation(), 2);
  EXPECT_EQ(moved.assignments(0).node(), "n2");
}

TEST_F(JobManagerTest, CancelOnlyByOwnerOrAdminAndStopsWorkers) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(jobs_->Cancel(job->job_id(), "", Caller{"mallory", false}).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto cancelled = jobs_->Cancel(job->job_id(), "enough", Caller{"root", true});
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  ASSERT_EQ(sink_.Stops().size(), 1u);
  EXPECT_EQ(sink_.Stops()[0].first, "n1");
  EXPECT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());  // Idempotent.
  EXPECT_EQ(jobs_->Cancel("nope", "", alice_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, PendingJobRunsWhenAnotherFinishes) {
  AddNode("n1", 2);
  auto first = jobs_->Submit(Spec(), "", alice_);
  auto second = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(Current(second->job_id()).state(), v1::JOB_STATE_PENDING);
  ASSERT_TRUE(jobs_->Cancel(first->job_id(), "", alice_).ok());
  EXPECT_EQ(Current(second->job_id()).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(JobManagerTest, ACrashLoopsWaitThatEndsWithoutCapacityNamesNoNextLaunch) {
  const std::string id = SubmitOnOneNode(absl::Seconds(2));
  ASSERT_FALSE(id.empty());
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));  // relaunched at once
  jobs_->OnWorkerState("n1", Exit(Current(id), 0, 1));  // waits 2 s
  ASSERT_GT(Current(id).backoff_until_unix_nanos(), 0);
  const Caller admin{"root", true};
  ASSERT_TRUE(jobs_->UpdateNode(NodeUpdate("n1", v1::NODE_ACTION_CORDON), admin).ok());
  clock_.Advance(absl::Seconds(3));
  jobs_->Tick();
  EXPECT_EQ(Current(id).state(), v1::JOB_STATE_RESTARTING);  // nowhere to go
  EXPECT_EQ(Current(id).backoff_until_unix_nanos(), 0);      // but no longer backing off
}

}  // namespace
}  // namespace ringmaster::coordinator
