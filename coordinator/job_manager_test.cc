// JobManager's jobs from submission to their end (the shared fixture is in
// job_manager_test_fixture.h): validation, scheduling, success, failures and restarts, ended-job
// retention, job ids and the store's writes, cancel, watch, crash-loop backoff, fatal exits,
// excluded and lost nodes.
#include "coordinator/job_manager.h"

#include <sqlite3.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
  v1::Register gpus = Node("gpus", 2);
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

// The per-job counters exist from submission at 0 (so increase() in an alert counts the first
// restart) and are removed with the job's other series when it ends (bounded cardinality).
TEST_F(JobManagerTest, JobCountersStartAtZeroAndAreRemovedWhenTheJobEnds) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  const std::string restarts = "ringmaster_job_restarts_total{job_id=\"" + job->job_id() + "\"} ";
  const std::string hangs = "ringmaster_job_hangs_total{job_id=\"" + job->job_id() + "\"} ";
  std::string page = registry_.RenderText();
  EXPECT_NE(page.find(restarts + "0\n"), std::string::npos) << page;
  EXPECT_NE(page.find(hangs + "0\n"), std::string::npos) << page;

  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 1, 0, /*signal=*/9));
  page = registry_.RenderText();
  EXPECT_NE(page.find(restarts + "1\n"), std::string::npos) << page;

  jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));  // No restarts left: FAILED.
  ASSERT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_FAILED);
  page = registry_.RenderText();
  EXPECT_EQ(page.find(restarts), std::string::npos) << page;
  EXPECT_EQ(page.find(hangs), std::string::npos) << page;
}

// Ended jobs are kept for ended_job_retention after they ended, then deleted from memory and the
// store with their request ids; running jobs and recently ended ones stay.
TEST_F(JobManagerTest, EndedJobsAreDeletedOnceTheirRetentionHasPassed) {
  ended_job_retention_ = absl::Hours(2);
  MakeManager();
  AddNode("n1", 4);
  auto old_job = jobs_->Submit(Spec(), "req-old", alice_);
  auto running = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(old_job.ok() && running.ok());
  ASSERT_TRUE(jobs_->Cancel(old_job->job_id(), "", alice_).ok());
  clock_.Advance(absl::Hours(1));
  auto recent = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(recent.ok());
  ASSERT_TRUE(jobs_->Cancel(recent->job_id(), "", alice_).ok());
  jobs_->Tick();  // the old job ended an hour ago: kept
  EXPECT_TRUE(jobs_->Get(old_job->job_id()).ok());
  clock_.Advance(absl::Hours(1) + absl::Seconds(1));
  jobs_->Tick();
  EXPECT_EQ(jobs_->Get(old_job->job_id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs_->Get(recent->job_id()).ok());
  EXPECT_TRUE(jobs_->Get(running->job_id()).ok());
  EXPECT_THAT(registry_.RenderText(), HasSubstr("ringmaster_jobs{state=\"cancelled\"} 1"));
  // Gone from the store too: a restarted coordinator does not bring it back.
  MakeManager();
  EXPECT_EQ(jobs_->Get(old_job->job_id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs_->Get(recent->job_id()).ok());
  // Its request id is free again: the same request makes a new job, whose id is another.
  auto again = jobs_->Submit(Spec(), "req-old", alice_);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->job_id(), old_job->job_id());
  // The recent job, past its retention now, goes at a later pass.
  clock_.Advance(absl::Hours(2));
  jobs_->Tick();
  EXPECT_EQ(jobs_->Get(recent->job_id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs_->Get(running->job_id()).ok());
}

// What a caller sends is bounded before it is stored or echoed: a cancel's reason, and an
// unknown job id quoted back.
TEST_F(JobManagerTest, ACancelReasonAndAnUnknownIdAreBounded) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  auto refused = jobs_->Cancel(job->job_id(), std::string(kMaxCancelReasonBytes + 1, 'r'), alice_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("reason: must be at most 1024 bytes, got 1025"));
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_RUNNING);
  auto unknown = jobs_->Get(std::string(100000, 'j'));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(),
            absl::StrCat("no job \"", std::string(64, 'j'), "\"... (100000 bytes)"));
}

// A listing pages through every job, newest first, each once: with a state filter too (the
// token skips jobs of other states), and the last page has no token. A negative limit and a
// token that names no job (its job deleted since) are refused, naming the field.
TEST_F(JobManagerTest, ListingPagesThroughEveryJobNewestFirst) {
  std::vector<std::string> submitted;  // in submission order
  for (int i = 0; i < 5; ++i) {
    auto job = jobs_->Submit(Spec(), absl::StrCat("req-", i), alice_);  // no node: pending
    ASSERT_TRUE(job.ok()) << job.status();
    submitted.push_back(job->job_id());
  }
  for (int i : {1, 2, 4}) ASSERT_TRUE(jobs_->Cancel(submitted[i], "", alice_).ok());
  auto all_pages = [&](const std::vector<v1::JobState>& states, int limit) {
    std::vector<std::string> ids;
    std::string token;
    int pages = 0;
    do {
      auto page = jobs_->List(states, limit, token);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      EXPECT_LE(static_cast<int>(page->jobs.size()), limit);
      for (const v1::JobStatus& job : page->jobs) ids.push_back(job.job_id());
      token = page->next_page_token;
      ++pages;
    } while (!token.empty() && pages <= 10);
    return std::make_pair(ids, pages);
  };
  EXPECT_EQ(all_pages({}, 2),
            std::make_pair(std::vector<std::string>(submitted.rbegin(), submitted.rend()), 3));
  EXPECT_EQ(all_pages({}, 5).second, 1) << "a full last page has no token";
  EXPECT_EQ(all_pages({v1::JOB_STATE_CANCELLED}, 1),
            std::make_pair(std::vector<std::string>{submitted[4], submitted[2], submitted[1]}, 3));
  EXPECT_EQ(all_pages({v1::JOB_STATE_PENDING}, 1),
            std::make_pair(std::vector<std::string>{submitted[3], submitted[0]}, 2));

  auto negative = jobs_->List({}, -1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("limit: must be >= 0"));
  auto forged = jobs_->List({}, 1, "job-7");
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(forged.status().message(),
              HasSubstr("page_token: \"job-7\" is not a next_page_token ListJobs gave"));
}

// A listing goes on after the job its token names was deleted between pages (it ended and its
// retention passed): with the jobs submitted before it.
TEST_F(JobManagerTest, ListingGoesOnAfterTheTokensJobWasDeleted) {
  ended_job_retention_ = absl::Hours(1);
  MakeManager();
  std::vector<std::string> submitted;
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(1));
    auto job = jobs_->Submit(Spec(), "", alice_);
    ASSERT_TRUE(job.ok()) << job.status();
    submitted.push_back(job->job_id());
  }
  auto first = jobs_->List({}, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->jobs.size(), 2u);
  EXPECT_EQ(first->jobs[1].job_id(), submitted[2]);
  ASSERT_TRUE(jobs_->Cancel(submitted[2], "", alice_).ok());
  clock_.Advance(absl::Hours(2));
  jobs_->Tick();
  ASSERT_FALSE(jobs_->Get(submitted[2]).ok()) << "deleted";
  auto second = jobs_->List({}, 2, first->next_page_token);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->jobs.size(), 2u);
  EXPECT_EQ(second->jobs[0].job_id(), submitted[1]);
  EXPECT_EQ(second->jobs[1].job_id(), submitted[0]);
  EXPECT_TRUE(second->next_page_token.empty());
}

// A deleted job's id is never given to another job: agents remember a job id's generations and
// would take the new job's generation 1 for a stale one. Here every 4-digit id of the name is
// one of a deleted job (in the store's used ids, not among the jobs): the new id is longer.
TEST_F(JobManagerTest, ADeletedJobsIdIsNotGivenAgain) {
  ended_job_retention_ = absl::Hours(1);
  MakeManager();
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  clock_.Advance(absl::Hours(2));
  jobs_->Tick();
  ASSERT_EQ(jobs_->Get(job->job_id()).status().code(), absl::StatusCode::kNotFound);
  // The other 65,535 4-digit ids of the name, as deleted jobs would have left them.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr), SQLITE_OK);
  for (int suffix = 0; suffix <= 0xffff; ++suffix) {
    const std::string id = absl::StrFormat("gpt-test-%04x", suffix);
    const std::string sql = absl::StrCat("INSERT OR IGNORE INTO used_job_ids VALUES ('", id, "')");
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  }
  ASSERT_EQ(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto next = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->job_id(), job->job_id());
  EXPECT_EQ(next->job_id().size(), std::string("gpt-test-").size() + 8);  // widened
}

// A write the store refuses (another process holds it locked past the busy timeout) is written
// again by Tick once the store takes writes: a job cancelled meanwhile is not brought back by a
// coordinator restart.
TEST_F(JobManagerTest, AFailedStoreWriteIsRetriedUntilItLands) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());  // its write fails (busy)
  EXPECT_THAT(registry_.RenderText(), HasSubstr("ringmaster_store_write_errors_total 1"));
  jobs_->Tick();  // too soon to retry: the store is still locked, nothing more fails
  EXPECT_THAT(registry_.RenderText(), HasSubstr("ringmaster_store_write_errors_total 1"));
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  clock_.Advance(absl::Seconds(1));
  jobs_->Tick();
  MakeManager();  // the coordinator restarts: what it finds is what was stored
  EXPECT_EQ(Current(job->job_id()).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(EventsOf(*jobs_->Get(job->job_id()), "state").back().state(), v1::JOB_STATE_CANCELLED);
}

// Only a job's newest events stay in memory (3 here): GetJob returns them with the count of the
// older ones, WatchJob replays the whole log (the older part from the store, at most 4 events a
// watch, then RESOURCE_EXHAUSTED naming where to resume), and after a coordinator restart the
// log goes on from the stored sequence.
TEST_F(JobManagerTest, OnlyTheNewestEventsStayInMemoryAndWatchReplaysThemAll) {
  events_in_memory_ = 3;
  max_store_replay_ = 4;
  MakeManager();
  AddNode("n1", 2);
  v1::JobSpec spec = Spec();
  spec.mutable_restart()->set_max_restarts(5);
  auto job = jobs_->Submit(spec, "", alice_);
  ASSERT_TRUE(job.ok());
  for (int i = 0; i < 2; ++i) jobs_->OnWorkerState("n1", Exit(Current(job->job_id()), 0, 1));
  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    const auto got = jobs_->Get(job->job_id());
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->events_size(), 3);
    const int64_t total = got->events_omitted() + 3;
    EXPECT_GE(total, 8);  // submitted, placed, then an exit, a restart and a launch each time
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got->events(i).sequence(), total - 2 + i);
    for (int64_t after : {int64_t{0}, int64_t{2}, total - 1}) {
      // Watches as ringctl does: again after the last event received while told to resume.
      std::vector<int64_t> sequences;
      int watches = 0;
      for (int64_t from = after;; ++watches) {
        ASSERT_LT(watches, 10) << "after " << after;
        auto watch = jobs_->Watch(job->job_id(), from, [&](const v1::WatchJobResponse& u) {
          if (u.has_event()) sequences.push_back(u.event().sequence());
        });
        if (watch.ok()) {
          jobs_->Unwatch(*watch);
          break;
        }
        ASSERT_EQ(watch.status().code(), absl::StatusCode::kResourceExhausted) << watch.status();
        ASSERT_FALSE(sequences.empty());
        EXPECT_THAT(watch.status().message(),
                    HasSubstr(absl::StrCat("watch again with after_sequence ", sequences.back())));
        from = sequences.back();
      }
      std::vector<int64_t> want;
      for (int64_t seq = after + 1; seq <= total; ++seq) want.push_back(seq);
      EXPECT_EQ(sequences, want) << "after " << after;
      // Up to 4 from the store a watch: the older total - 3 - after need that many resumes.
      const int64_t from_store = std::max<int64_t>(0, total - 3 - after);
      EXPECT_EQ(watches, from_store == 0 ? 0 : (from_store - 1) / 4) << "after " << after;
    }
    EXPECT_EQ(jobs_->Watch(job->job_id(), -1, [](const v1::WatchJobResponse&) {}).status().code(),
              absl::StatusCode::kInvalidArgument);
  };
  check("running");
  const int64_t before_restart = jobs_->Get(job->job_id())->events_omitted() + 3;
  MakeManager();  // a coordinator restart: the newest 3 are loaded, the count goes on
  check("recovered");
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());
  const auto cancelled = jobs_->Get(job->job_id());
  EXPECT_GT(cancelled->events(2).sequence(), before_restart);
  EXPECT_EQ(cancelled->events(2).sequence(), cancelled->events_omitted() + 3);
  EXPECT_EQ(cancelled->events(2).state(), v1::JOB_STATE_CANCELLED);
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

// A job that failed for good is exported with its failure time for an hour
// (RingmasterJobFailed fires on it), across a coordinator restart too; a cancelled one is not.
TEST_F(JobManagerTest, AFailedJobIsExportedForAnHourAfterItFailed) {
  AddNode("n1", 4);
  auto failed = jobs_->Submit(Spec(), "", alice_);
  auto cancelled = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(failed.ok() && cancelled.ok());
  const std::string series =
      absl::StrCat("ringmaster_job_failed_timestamp_seconds{job_id=\"", failed->job_id(), "\"}");
  EXPECT_TRUE(std::isnan(SeriesValue(registry_.RenderText(), series)));
  jobs_->OnWorkerState("n1", Exit(Current(failed->job_id()), 0, kExitFatal));
  ASSERT_EQ(Current(failed->job_id()).state(), v1::JOB_STATE_FAILED);
  const double failed_at = absl::ToDoubleSeconds(clock_.Now() - absl::UnixEpoch());
  EXPECT_EQ(SeriesValue(registry_.RenderText(), series), failed_at);
  ASSERT_TRUE(jobs_->Cancel(cancelled->job_id(), "", alice_).ok());
  EXPECT_THAT(registry_.RenderText(), Not(HasSubstr(cancelled->job_id())));

  clock_.Advance(absl::Minutes(59));
  // A coordinator restart: a new process starts with no series (this test's managers share one
  // registry), and the new manager exports it again, and ends it.
  registry_.AddGauge("ringmaster_job_failed_timestamp_seconds", "", {"job_id"})
      .Remove({failed->job_id()});
  MakeManager();
  jobs_->Tick();
  EXPECT_EQ(SeriesValue(registry_.RenderText(), series), failed_at);
  clock_.Advance(absl::Minutes(1));
  jobs_->Tick();
  EXPECT_THAT(registry_.RenderText(), Not(HasSubstr(failed->job_id())));
  MakeManager();  // past the hour: not exported again
  EXPECT_THAT(registry_.RenderText(), Not(HasSubstr(failed->job_id())));
}

TEST_F(JobManagerTest, LostNodeRestartsTheJobElsewhere) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(Current(job->job_id()).assignments(0).node(), "n1");
  ASSERT_TRUE(nodes_->Register(Node("n2", 2)).ok());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(nodes_->Register(Node("n2", 2)).ok());  // n2 fresh, n1 silent.
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

TEST_F(JobManagerTest, WatchGetsHistoryThenLiveEventsAndProgress) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  std::vector<v1::WatchJobResponse> updates;
  auto watch =
      jobs_->Watch(job->job_id(), 0, [&](const v1::WatchJobResponse& u) { updates.push_back(u); });
  ASSERT_TRUE(watch.ok());
  ASSERT_GE(updates.size(), 2u);  // PENDING and RUNNING events, then a progress snapshot.
  EXPECT_EQ(updates[0].event().sequence(), 1);
  EXPECT_EQ(updates[1].event().state(), v1::JOB_STATE_RUNNING);
  updates.clear();

  v1::JobStatus running = Current(job->job_id());
  for (int rank = 0; rank < 2; ++rank) {
    v1::StepSummary s;
    s.mutable_job()->set_job_id(job->job_id());
    s.mutable_job()->set_generation(1);
    s.set_rank(rank);
    s.set_step(5 + rank);
    s.set_loss(3.5);
    s.set_tokens_per_second(100);
    jobs_->OnStepSummary(s);
  }
  clock_.Advance(absl::Seconds(1));
  jobs_->Tick();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].progress().step(), 5);  // The slowest rank.
  EXPECT_EQ(updates[0].progress().loss(), 3.5);
  EXPECT_EQ(updates[0].progress().tokens_per_second(), 200);  // Two DP replicas.

  jobs_->OnWorkerState("n1", Exit(running, 0, 0));
  jobs_->OnWorkerState("n1", Exit(running, 1, 0));
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(updates[1].state(), v1::JOB_STATE_SUCCEEDED);
  jobs_->Unwatch(*watch);
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
