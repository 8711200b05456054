// JobManager's records of its jobs (the shared fixture is in job_manager_test_fixture.h): their
// series, ended-job retention, listing, job ids, the store's writes, the events kept in memory and
// watch. The jobs' lifecycle is in job_manager_test.cc.
#include <sqlite3.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_test_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

// A write the store refuses (as SQLite does once another process has held it locked past the
// busy timeout) is written again by Tick once the store takes writes: a job cancelled meanwhile
// is not brought back by a coordinator restart.
TEST_F(JobManagerTest, AFailedStoreWriteIsRetriedUntilItLands) {
  AddNode("n1", 2);
  auto job = jobs_->Submit(Spec(), "", alice_);
  ASSERT_TRUE(job.ok());
  faults_->FailWrites(std::nullopt);  // every write is refused until healed
  ASSERT_TRUE(jobs_->Cancel(job->job_id(), "", alice_).ok());  // its write fails
  EXPECT_THAT(registry_.RenderText(), HasSubstr("ringmaster_store_write_errors_total 1"));
  jobs_->Tick();  // too soon to retry: the store still refuses, nothing more fails
  EXPECT_THAT(registry_.RenderText(), HasSubstr("ringmaster_store_write_errors_total 1"));
  faults_->HealWrites();
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

}  // namespace
}  // namespace ringmaster::coordinator
