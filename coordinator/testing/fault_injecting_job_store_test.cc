// FaultInjectingJobStore over a real SqliteJobStore: told nothing it changes nothing; injected
// failures, latency, the hold and a crash each do what the header says, and after a crash the
// file holds exactly the writes that landed before it.
#include "coordinator/testing/fault_injecting_job_store.h"

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/testing/subprocess.h"
#include "coordinator/job_store_sqlite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::JobStatus Status(const std::string& job_id, v1::JobState state = v1::JOB_STATE_PENDING) {
  v1::JobStatus s;
  s.set_job_id(job_id);
  s.set_state(state);
  return s;
}

v1::JobEvent Event(int64_t sequence) {
  v1::JobEvent e;
  e.set_sequence(sequence);
  e.set_kind("state");
  return e;
}

class FaultInjectingJobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(ringmaster::testing::TestTempDir(), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
    store_ = std::make_unique<FaultInjectingJobStore>(OpenSqlite());
  }

  std::unique_ptr<JobStore> OpenSqlite() {
    auto store = SqliteJobStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // The job ids stored in the file, read through a connection of its own.
  std::vector<std::string> StoredIds() {
    std::unique_ptr<JobStore> other = OpenSqlite();
    auto jobs = other->LoadAll();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    std::vector<std::string> ids;
    if (jobs.ok()) {
      for (const StoredJob& job : *jobs) ids.push_back(job.status.job_id());
    }
    return ids;
  }

  std::string path_;
  std::unique_ptr<FaultInjectingJobStore> store_;
};

TEST_F(FaultInjectingJobStoreTest, ToldNothingItPassesEveryCallThrough) {
  ASSERT_TRUE(store_->CreateJob(Status("a"), {Event(1)}, "req-a").ok());
  ASSERT_TRUE(store_->AppendEvent("a", Event(2)).ok());
  ASSERT_TRUE(store_->PutJobWithEvents(Status("a", v1::JOB_STATE_RUNNING), {Event(3)}).ok());
  ASSERT_TRUE(store_->PutJob(Status("b")).ok());
  ASSERT_TRUE(store_->DeleteJobs({"b"}).ok());
  v1::NodeCordon cordon;
  cordon.set_reason("ECC errors");
  ASSERT_TRUE(store_->PutCordon("n1", cordon).ok());
  ASSERT_TRUE(store_->PutNodeIdentity("n1", "agent-1").ok());
  // The wrapped store's own errors come back as they are.
  EXPECT_EQ(store_->AppendEvent("a", Event(9)).code(), absl::StatusCode::kFailedPrecondition);

  auto jobs = store_->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].status.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ((*jobs)[0].event_count, 3);
  auto events = store_->ReadEvents("a", 1, 3);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
  EXPECT_EQ(*store_->FindRequest("req-a"), std::optional<std::string>("a"));
  EXPECT_TRUE(*store_->JobIdUsed("b"));
  ASSERT_EQ(store_->LoadCordons()->size(), 1u);
  EXPECT_EQ(store_->LoadCordons()->at(0).second.reason(), "ECC errors");
  EXPECT_THAT(*store_->LoadNodeIdentities(), ElementsAre(std::make_pair("n1", "agent-1")));
  EXPECT_THAT(store_->writes(),
              ElementsAre(JobStoreWrite::kCreateJob, JobStoreWrite::kAppendEvent,
                          JobStoreWrite::kPutJobWithEvents, JobStoreWrite::kPutJob,
                          JobStoreWrite::kDeleteJobs, JobStoreWrite::kPutCordon,
                          JobStoreWrite::kPutNodeIdentity, JobStoreWrite::kAppendEvent));
  EXPECT_EQ(store_->injected_failures(), 0);
}

TEST_F(FaultInjectingJobStoreTest, TheNextWritesFailWithoutReachingTheStore) {
  store_->FailNextWrites(2);
  absl::Status first = store_->CreateJob(Status("a"), {Event(1)}, "");
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(first.message(), "JobStore::CreateJob: injected write failure");
  EXPECT_EQ(store_->PutJob(Status("b")).code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(StoredIds(), IsEmpty());
  EXPECT_TRUE(store_->PutJob(Status("c")).ok());  // the third lands
  EXPECT_THAT(StoredIds(), ElementsAre("c"));
  EXPECT_EQ(store_->injected_failures(), 2);
  EXPECT_THAT(store_->writes(), ElementsAre(JobStoreWrite::kPutJob));
}

TEST_F(FaultInjectingJobStoreTest, WritesOfOneMethodFailUntilHealed) {
  ASSERT_TRUE(store_->CreateJob(Status("a"), {Event(1)}, "").ok());
  store_->FailWrites(JobStoreWrite::kPutJobWithEvents, absl::ResourceExhaustedError("disk full"));
  for (int i = 0; i < 3; ++i) {
    absl::Status failed = store_->PutJobWithEvents(Status("a"), {Event(2)});
    EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(failed.message(), "JobStore::PutJobWithEvents: disk full");
  }
  EXPECT_TRUE(store_->AppendEvent("a", Event(2)).ok());  // another method lands
  store_->HealWrites();
  EXPECT_TRUE(store_->PutJobWithEvents(Status("a"), {Event(3)}).ok());
  EXPECT_EQ(store_->LoadAll()->at(0).event_count, 3);
  EXPECT_EQ(store_->injected_failures(), 3);

  store_->FailWrites(std::nullopt);  // every method
  EXPECT_FALSE(store_->PutCordon("n1", v1::NodeCordon()).ok());
  EXPECT_FALSE(store_->PutNodeIdentity("n1", "agent").ok());
  EXPECT_FALSE(store_->DeleteJobs({"a"}).ok());
  EXPECT_THAT(StoredIds(), ElementsAre("a"));
}

TEST_F(FaultInjectingJobStoreTest, EachWriteTakesItsLatencyOnTheFakeClock) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  store_->SetWriteLatency(&clock, absl::Seconds(3));
  ASSERT_TRUE(store_->PutJob(Status("a")).ok());
  ASSERT_TRUE(store_->AppendEvent("a", Event(1)).ok());
  EXPECT_EQ(clock.Now() - start, absl::Seconds(6));
  ASSERT_TRUE(store_->LoadAll().ok());  // reads take none
  store_->FailNextWrites(1);
  EXPECT_FALSE(store_->PutJob(Status("b")).ok());  // nor do failed ones: they reach no disk
  EXPECT_EQ(clock.Now() - start, absl::Seconds(6));
  store_->SetWriteLatency(nullptr, absl::ZeroDuration());
  ASSERT_TRUE(store_->PutJob(Status("c")).ok());
  EXPECT_EQ(clock.Now() - start, absl::Seconds(6));
}

TEST_F(FaultInjectingJobStoreTest, HeldWritesWaitForTheTestWhileReadsGoOn) {
  store_->HoldWrites();
  absl::Status created = absl::UnknownError("not returned");
  std::thread writer([&] { created = store_->CreateJob(Status("a"), {Event(1)}, "req"); });
  ASSERT_TRUE(store_->AwaitHeldWrites(1, absl::Seconds(30)));
  auto jobs = store_->LoadAll();  // a read passes the hold
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, IsEmpty());
  EXPECT_THAT(store_->writes(), IsEmpty());
  store_->ReleaseWrites();
  writer.join();
  EXPECT_TRUE(created.ok()) << created;
  EXPECT_THAT(StoredIds(), ElementsAre("a"));
}

TEST_F(FaultInjectingJobStoreTest, DestroyingTheStoreLetsAHeldWriteFinish) {
  store_->HoldWrites();
  absl::Status put = absl::UnknownError("not returned");
  std::thread writer([&] { put = store_->PutJob(Status("a")); });
  ASSERT_TRUE(store_->AwaitHeldWrites(1, absl::Seconds(30)));
  store_.reset();
  writer.join();
  EXPECT_TRUE(put.ok()) << put;
  EXPECT_THAT(StoredIds(), ElementsAre("a"));
}

// The crash comes between write 2 and write 3: the file holds the first two, and every call after
// the crash fails.
TEST_F(FaultInjectingJobStoreTest, ACrashAfterTwoWritesKeepsExactlyThose) {
  store_->CrashAfterWrites(2);
  ASSERT_TRUE(store_->CreateJob(Status("a"), {Event(1)}, "").ok());
  EXPECT_FALSE(store_->crashed());
  ASSERT_TRUE(store_->PutJobWithEvents(Status("a", v1::JOB_STATE_RUNNING), {Event(2)}).ok());
  EXPECT_TRUE(store_->crashed());
  absl::Status after = store_->AppendEvent("a", Event(3));
  EXPECT_EQ(after.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(after.message(), "the store crashed (injected)");
  EXPECT_EQ(store_->LoadAll().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->JobIdUsed("a").status().code(), absl::StatusCode::kUnavailable);

  std::unique_ptr<JobStore> reopened = OpenSqlite();  // as a restarted coordinator would
  auto jobs = reopened->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].status.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ((*jobs)[0].event_count, 2);
}

// A write the wrapped store refuses still counts towards the crash; an injected failure does not
// (it never reached the store).
TEST_F(FaultInjectingJobStoreTest, TheCrashCountsWritesThatReachedTheStore) {
  store_->CrashAfterWrites(2);
  store_->FailNextWrites(1);
  EXPECT_FALSE(store_->PutJob(Status("a")).ok());                                        // injected
  EXPECT_EQ(store_->AppendEvent("none", Event(1)).code(), absl::StatusCode::kNotFound);  // 1
  EXPECT_FALSE(store_->crashed());
  EXPECT_TRUE(store_->PutJob(Status("b")).ok());  // 2
  EXPECT_TRUE(store_->crashed());
  EXPECT_THAT(StoredIds(), ElementsAre("b"));
  EXPECT_FALSE(store_->PutJob(Status("c")).ok());  // refused: the crash
  EXPECT_EQ(store_->write_attempts(), 4);          // all of them
}

TEST_F(FaultInjectingJobStoreTest, CrashingNowFailsEveryCall) {
  ASSERT_TRUE(store_->PutJob(Status("a")).ok());
  store_->CrashAfterWrites(0);
  EXPECT_TRUE(store_->crashed());
  EXPECT_FALSE(store_->PutJob(Status("b")).ok());
  EXPECT_FALSE(store_->FindRequest("r").ok());
  EXPECT_FALSE(store_->LoadCordons().ok());
  EXPECT_FALSE(store_->LoadNodeIdentities().ok());
  EXPECT_FALSE(store_->ReadEvents("a", 0, 0).ok());
  EXPECT_THAT(StoredIds(), ElementsAre("a"));
}

}  // namespace
}  // namespace ringmaster::coordinator
