// JobStore's contract, on the SQLite store: what each call stores, refuses and reads back, all or
// nothing; reopening keeps everything; concurrent writers all land. The SQLite file itself (its
// format, damage, migrations, a SIGKILL) is job_store_sqlite_test.cc's.
#include "coordinator/job_store.h"

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_store_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;

TEST_F(JobStoreTest, PutAndLoadRoundTripsAFullStatus) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  v1::JobStatus status = FullStatus("job-a", 100);
  ASSERT_TRUE(store->PutJob(status).ok());

  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1);
  EXPECT_TRUE(SameProto((*jobs)[0].status, status));
  EXPECT_TRUE((*jobs)[0].events.empty());
}

TEST_F(JobStoreTest, PutJobReplacesStatusAndKeepsEventsAndOrder) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJobWithEvents(FullStatus("a", 1), {Event(1)}).ok());
  ASSERT_TRUE(store->PutJob(FullStatus("b", 1)).ok());  // Same submit time: stored later.
  v1::JobStatus done = FullStatus("a", 1);
  done.set_state(v1::JOB_STATE_SUCCEEDED);
  done.set_end_time_unix_nanos(99);
  ASSERT_TRUE(store->PutJob(done).ok());

  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(JobIds(*jobs), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(SameProto((*jobs)[0].status, done));
  ASSERT_EQ((*jobs)[0].events.size(), 1);
  EXPECT_TRUE(SameProto((*jobs)[0].events[0], Event(1)));
}

TEST_F(JobStoreTest, EmptyJobIdIsInvalid) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->PutJob(FullStatus("", 1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->PutJobWithEvents(FullStatus("", 1), {Event(1)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CreateJob(FullStatus("", 1), {}, "r").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(JobStoreTest, EventsAppendInOrderAndAWrongSequenceIsRefused) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(FullStatus("j", 1)).ok());
  // The first event must be 1.
  absl::Status zero = store->AppendEvent("j", Event(0));
  EXPECT_EQ(zero.code(), absl::StatusCode::kFailedPrecondition) << zero;
  EXPECT_EQ(store->AppendEvent("j", Event(2)).code(), absl::StatusCode::kFailedPrecondition);
  for (int64_t seq = 1; seq <= 5; ++seq) {
    ASSERT_TRUE(store->AppendEvent("j", Event(seq, absl::StrCat("k", seq))).ok()) << seq;
  }
  // A duplicated append (a retry) and a gap are both refused, and change nothing.
  absl::Status duplicate = store->AppendEvent("j", Event(5));
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(duplicate.message(), HasSubstr("expected 6"));
  EXPECT_EQ(store->AppendEvent("j", Event(7)).code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1);
  ASSERT_EQ((*jobs)[0].events.size(), 5);
  for (int64_t seq = 1; seq <= 5; ++seq) {
    EXPECT_TRUE(SameProto((*jobs)[0].events[seq - 1], Event(seq, absl::StrCat("k", seq))));
  }
}

// LoadAll keeps a job's newest events (the count says how many there are in all); ReadEvents
// gives any range of them back.
TEST_F(JobStoreTest, LoadAllKeepsTheNewestEventsAndReadEventsGivesAnyRange) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(FullStatus("j", 1)).ok());
  ASSERT_TRUE(store->PutJob(FullStatus("quiet", 1)).ok());
  for (int64_t seq = 1; seq <= 7; ++seq) {
    ASSERT_TRUE(store->AppendEvent("j", Event(seq, absl::StrCat("k", seq))).ok()) << seq;
  }
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll(/*newest_events=*/3);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2);
  EXPECT_EQ((*jobs)[0].event_count, 7);
  ASSERT_EQ((*jobs)[0].events.size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(SameProto((*jobs)[0].events[i], Event(5 + i, absl::StrCat("k", 5 + i)))) << i;
  }
  EXPECT_EQ((*jobs)[1].event_count, 0);
  EXPECT_TRUE((*jobs)[1].events.empty());

  absl::StatusOr<std::vector<v1::JobEvent>> older = store->ReadEvents("j", 0, 4);
  ASSERT_TRUE(older.ok()) << older.status();
  ASSERT_EQ(older->size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(SameProto((*older)[i], Event(1 + i, absl::StrCat("k", 1 + i)))) << i;
  }
  older = store->ReadEvents("j", 5, 7);
  ASSERT_TRUE(older.ok()) << older.status();
  ASSERT_EQ(older->size(), 2);
  EXPECT_EQ((*older)[0].sequence(), 6);
  // Past the newest: a gap in the log, which a caller must not paper over.
  older = store->ReadEvents("j", 5, 9);
  EXPECT_EQ(older.status().code(), absl::StatusCode::kDataLoss) << older.status();
  EXPECT_THAT(older.status().message(), HasSubstr("stored event 8 is missing"));
  older = store->ReadEvents("j", 3, 3);
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_TRUE(older->empty());
}

TEST_F(JobStoreTest, AppendEventForUnknownJobIsNotFound) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::Status status = store->AppendEvent("ghost", Event(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("ghost"));
}

TEST_F(JobStoreTest, PutJobWithEventsIsAllOrNothing) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  v1::JobStatus running = FullStatus("j", 1);
  ASSERT_TRUE(store->PutJobWithEvents(running, {Event(1), Event(2)}).ok());
  v1::JobStatus failed = running;
  failed.set_state(v1::JOB_STATE_FAILED);
  // Event 3 is fine, event 5 is not: neither the status nor event 3 may be stored.
  EXPECT_EQ(store->PutJobWithEvents(failed, {Event(3), Event(5)}).code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1);
  EXPECT_TRUE(SameProto((*jobs)[0].status, running));
  EXPECT_EQ((*jobs)[0].events.size(), 2);

  ASSERT_TRUE(store->PutJobWithEvents(failed, {Event(3), Event(4)}).ok());
  jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(SameProto((*jobs)[0].status, failed));
  EXPECT_EQ((*jobs)[0].events.size(), 4);
}

TEST_F(JobStoreTest, CreateJobIsIdempotentPerRequestId) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::optional<std::string>> found = store->FindRequest("req-1");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_FALSE(found->has_value());

  ASSERT_TRUE(store->CreateJob(FullStatus("first", 1), {Event(1)}, "req-1").ok());
  // A retried SubmitJob: the coordinator picked a new job id, but the request id is the same.
  absl::Status again = store->CreateJob(FullStatus("second", 2), {Event(1)}, "req-1");
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_THAT(again.message(), HasSubstr("first"));

  found = store->FindRequest("req-1");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, std::optional<std::string>("first"));

  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(JobIds(*jobs), std::vector<std::string>{"first"});
  ASSERT_EQ((*jobs)[0].events.size(), 1);
}

TEST_F(JobStoreTest, DeleteJobsRemovesThemWithTheirEventsAndRequestIdsOnly) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->CreateJob(FullStatus("gone", 1), {Event(1), Event(2)}, "req-gone").ok());
  ASSERT_TRUE(store->CreateJob(FullStatus("kept", 2), {Event(1)}, "req-kept").ok());
  ASSERT_TRUE(store->CreateJob(FullStatus("gone-too", 3), {Event(1)}, "").ok());
  ASSERT_TRUE(store->DeleteJobs({"gone", "never-stored", "gone-too"}).ok());
  store.reset();
  store = OpenStore();  // what is on disk
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(JobIds(*jobs), std::vector<std::string>{"kept"});
  EXPECT_EQ((*jobs)[0].events.size(), 1);
  EXPECT_EQ(*store->FindRequest("req-gone"), std::nullopt);
  EXPECT_EQ(*store->FindRequest("req-kept"), std::optional<std::string>("kept"));
  // The ids stay used (agents remember a job id's generations); the request id is free.
  EXPECT_EQ(*store->JobIdUsed("gone"), true);
  EXPECT_EQ(*store->JobIdUsed("kept"), true);
  EXPECT_EQ(*store->JobIdUsed("never-stored"), false);
  EXPECT_TRUE(store->CreateJob(FullStatus("gone", 4), {Event(1)}, "req-gone").ok());
  // Events of a deleted job do not linger under its id.
  jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2);
  EXPECT_EQ((*jobs)[1].events.size(), 1);
}

TEST_F(JobStoreTest, CreateJobWithoutRequestIdAndWithATakenJobId) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->CreateJob(FullStatus("a", 1), {}, "").ok());
  absl::StatusOr<std::optional<std::string>> found = store->FindRequest("");
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());

  // Same job id under a new request id: refused, and the request id is not recorded.
  absl::Status taken = store->CreateJob(FullStatus("a", 2), {Event(1)}, "req-2");
  EXPECT_EQ(taken.code(), absl::StatusCode::kFailedPrecondition) << taken;
  found = store->FindRequest("req-2");
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1);
  EXPECT_EQ((*jobs)[0].status.submit_time_unix_nanos(), 1);
  EXPECT_TRUE((*jobs)[0].events.empty());
}

TEST_F(JobStoreTest, CreateJobWithABadEventWritesNothing) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->CreateJob(FullStatus("a", 1), {Event(1), Event(1)}, "req").code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::optional<std::string>> found = store->FindRequest("req");
  ASSERT_TRUE(found.ok());
  EXPECT_FALSE(found->has_value());
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty());
  // The request id is still free for the retry.
  EXPECT_TRUE(store->CreateJob(FullStatus("a", 1), {Event(1)}, "req").ok());
}

TEST_F(JobStoreTest, LoadAllReturnsTheOrderJobsWereFirstStored) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  // Submit times disagree with the storing order (a clock that went back): storing order wins.
  ASSERT_TRUE(store->PutJob(FullStatus("t30", 30)).ok());
  ASSERT_TRUE(store->CreateJob(FullStatus("t10", 10), {Event(1)}, "r10").ok());
  ASSERT_TRUE(store->PutJob(FullStatus("t20-x", 20)).ok());
  ASSERT_TRUE(store->PutJob(FullStatus("t20-a", 20)).ok());
  ASSERT_TRUE(store->PutJob(FullStatus("t20-x", 20)).ok());  // An update keeps its place.
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(JobIds(*jobs), (std::vector<std::string>{"t30", "t10", "t20-x", "t20-a"}));
}

TEST_F(JobStoreTest, ReopenedStoreHasEverything) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateJob(FullStatus("a", 1), {Event(1)}, "req-a").ok());
    ASSERT_TRUE(store->AppendEvent("a", Event(2, "placed")).ok());
    ASSERT_TRUE(store->CreateJob(FullStatus("b", 2), {}, "").ok());
    v1::JobStatus b = FullStatus("b", 2);
    b.set_state(v1::JOB_STATE_CANCELLED);
    ASSERT_TRUE(store->PutJobWithEvents(b, {Event(1, "cancel")}).ok());
  }
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(JobIds(*jobs), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(SameProto((*jobs)[0].status, FullStatus("a", 1)));
  ASSERT_EQ((*jobs)[0].events.size(), 2);
  EXPECT_TRUE(SameProto((*jobs)[0].events[1], Event(2, "placed")));
  EXPECT_EQ((*jobs)[1].status.state(), v1::JOB_STATE_CANCELLED);
  ASSERT_EQ((*jobs)[1].events.size(), 1);
  EXPECT_EQ((*jobs)[1].events[0].kind(), "cancel");
  absl::StatusOr<std::optional<std::string>> found = store->FindRequest("req-a");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, std::optional<std::string>("a"));
  // The log continues where it left off.
  EXPECT_EQ(store->AppendEvent("a", Event(2)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store->AppendEvent("a", Event(3)).ok());
}

TEST_F(JobStoreTest, ConcurrentWritersAllLand) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kEvents = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string id = absl::StrCat("job-", t);
      if (!store->CreateJob(FullStatus(id, t), {}, absl::StrCat("req-", t)).ok()) ++failures;
      for (int seq = 1; seq <= kEvents; ++seq) {
        if (!store->AppendEvent(id, Event(seq)).ok()) ++failures;
      }
    });
  }
  // A reader alongside: every snapshot it sees is whole (LoadAll checks each log is gapless).
  threads.emplace_back([&] {
    for (int i = 0; i < 20; ++i) {
      if (!store->LoadAll().ok()) ++failures;
    }
  });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);

  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), kThreads);
  // The threads raced to create their jobs, so any storing order is right; each job is there
  // once with all its events.
  std::set<std::string> ids;
  for (const StoredJob& job : *jobs) {
    ids.insert(job.status.job_id());
    ASSERT_EQ(job.events.size(), kEvents);
    for (int seq = 1; seq <= kEvents; ++seq) EXPECT_EQ(job.events[seq - 1].sequence(), seq);
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ids.count(absl::StrCat("job-", t)), 1u);
}

TEST_F(JobStoreTest, ConcurrentCreatesWithOneRequestIdMakeOneJob) {
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      results[t] = store->CreateJob(FullStatus(absl::StrCat("job-", t), t), {Event(1)}, "same");
    });
  }
  for (std::thread& thread : threads) thread.join();
  int created = -1, already = 0;
  for (int t = 0; t < kThreads; ++t) {
    if (results[t].ok()) {
      EXPECT_EQ(created, -1) << "two jobs created for one request";
      created = t;
    } else {
      EXPECT_EQ(results[t].code(), absl::StatusCode::kAlreadyExists) << results[t];
      ++already;
    }
  }
  ASSERT_NE(created, -1);
  EXPECT_EQ(already, kThreads - 1);
  absl::StatusOr<std::optional<std::string>> found = store->FindRequest("same");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, std::optional<std::string>(absl::StrCat("job-", created)));
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(JobIds(*jobs), std::vector<std::string>{absl::StrCat("job-", created)});
}

TEST_F(JobStoreTest, CordonsSurviveReopeningAndCanBeReplacedAndRemoved) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutCordon("node-b", MakeCordon("ECC errors", "alice")).ok());
    ASSERT_TRUE(store->PutCordon("node-a", MakeCordon("", "")).ok());
    ASSERT_TRUE(store->PutCordon("node-c", MakeCordon("x", "bob")).ok());
    ASSERT_TRUE(store->PutCordon("node-b", MakeCordon("ECC errors, replaced", "carol")).ok());
    ASSERT_TRUE(store->PutCordon("node-c", std::nullopt).ok());
    ASSERT_TRUE(store->PutCordon("never-cordoned", std::nullopt).ok());
  }
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto cordons = store->LoadCordons();
  ASSERT_TRUE(cordons.ok()) << cordons.status();
  ASSERT_EQ(cordons->size(), 2);
  EXPECT_EQ((*cordons)[0].first, "node-a");
  EXPECT_EQ((*cordons)[1].first, "node-b");
  EXPECT_TRUE(SameProto((*cordons)[1].second, MakeCordon("ECC errors, replaced", "carol")));
  EXPECT_EQ(store->PutCordon("", MakeCordon("x", "y")).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobStoreTest, NodeIdentitiesSurviveReopeningAndCanBeReplacedAndRemoved) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutNodeIdentity("node-b", "agents-b").ok());
    ASSERT_TRUE(store->PutNodeIdentity("node-a", "agents-a").ok());
    ASSERT_TRUE(store->PutNodeIdentity("node-c", "agents-c").ok());
    ASSERT_TRUE(store->PutNodeIdentity("node-b", "agents-b2").ok());
    ASSERT_TRUE(store->PutNodeIdentity("node-c", std::nullopt).ok());
    ASSERT_TRUE(store->PutNodeIdentity("never-bound", std::nullopt).ok());
  }
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto bound = store->LoadNodeIdentities();
  ASSERT_TRUE(bound.ok()) << bound.status();
  const std::vector<std::pair<std::string, std::string>> want = {{"node-a", "agents-a"},
                                                                 {"node-b", "agents-b2"}};
  EXPECT_EQ(*bound, want);
  EXPECT_EQ(store->PutNodeIdentity("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->PutNodeIdentity("node-d", "").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmaster::coordinator
