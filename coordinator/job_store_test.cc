#include "coordinator/job_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;

::testing::AssertionResult SameProto(const google::protobuf::Message& actual,
                                     const google::protobuf::Message& expected) {
  if (google::protobuf::util::MessageDifferencer::Equals(actual, expected)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got:\n"
                                       << actual.DebugString() << "want:\n"
                                       << expected.DebugString();
}

// A status with every part filled: spec (with a map), assignments, groups, plan and progress.
v1::JobStatus FullStatus(const std::string& job_id, int64_t submit_time) {
  v1::JobStatus s;
  s.set_job_id(job_id);
  v1::JobSpec* spec = s.mutable_spec();
  spec->set_name("gpt-small");
  spec->set_nodes(2);
  spec->set_devices_per_node(2);
  spec->mutable_parallelism()->set_tensor(2);
  spec->mutable_parallelism()->set_data(2);
  v1::TrainerSpec* trainer = spec->mutable_trainer();
  trainer->set_builtin("gpt");
  trainer->mutable_model()->set_layers(4);
  trainer->mutable_model()->set_d_model(256);
  trainer->mutable_model()->set_heads(8);
  trainer->mutable_batch()->set_global_batch(32);
  trainer->mutable_optimizer()->set_lr(3e-4);
  trainer->set_steps(1000);
  (*trainer->mutable_env())["NCCL_DEBUG"] = "INFO";
  (*trainer->mutable_env())["OMP_NUM_THREADS"] = "4";
  spec->mutable_checkpoint()->set_dir("/ckpt");
  spec->mutable_restart()->set_max_restarts(3);
  s.set_state(v1::JOB_STATE_RUNNING);
  s.set_reason("running");
  s.set_generation(2);
  s.set_restarts(1);
  for (int rank = 0; rank < 4; ++rank) {
    v1::RankAssignment* a = s.add_assignments();
    a->set_rank(rank);
    a->set_node(rank < 2 ? "node-a" : "node-b");
    a->set_local_device(rank % 2);
    a->set_local_rank(rank % 2);
    a->set_tp_rank(rank % 2);
    a->set_dp_rank(rank / 2);
  }
  for (int g = 0; g < 2; ++g) {
    v1::RankGroup* tp = s.mutable_groups()->add_tensor();
    tp->set_name(absl::StrCat("tp", g));
    tp->add_ranks(2 * g);
    tp->add_ranks(2 * g + 1);
    v1::RankGroup* dp = s.mutable_groups()->add_data();
    dp->set_name(absl::StrCat("dp", g));
    dp->add_ranks(g);
    dp->add_ranks(g + 2);
  }
  v1::PlanExplanation* plan = s.mutable_plan();
  plan->mutable_parallelism()->set_tensor(2);
  plan->mutable_parallelism()->set_pipeline(1);
  plan->mutable_parallelism()->set_data(2);
  plan->set_memory_per_device_bytes(int64_t{3} << 30);
  plan->set_bubble_fraction(0.0);
  plan->set_microbatches(4);
  plan->set_parameters(12345678);
  plan->add_reasons("tensor=2 fits one node");
  plan->add_reasons("data=2 uses the remaining devices");
  s.mutable_progress()->set_step(17);
  s.mutable_progress()->set_loss(3.25);
  s.mutable_progress()->set_checkpoint_step(-1);
  s.set_submit_time_unix_nanos(submit_time);
  s.set_owner("alice");  // Serialized last (highest field number).
  return s;
}

v1::JobEvent Event(int64_t sequence, const std::string& kind = "state") {
  v1::JobEvent e;
  e.set_sequence(sequence);
  e.set_time_unix_nanos(1000 + sequence);
  e.set_generation(1);
  e.set_kind(kind);
  e.set_message(absl::StrCat(kind, " #", sequence));
  e.set_state(v1::JOB_STATE_RUNNING);
  e.add_ranks(0);
  e.add_ranks(3);  // Serialized last: a packed field whose truncation cannot parse.
  return e;
}

std::vector<std::string> JobIds(const std::vector<StoredJob>& jobs) {
  std::vector<std::string> ids;
  for (const StoredJob& job : jobs) ids.push_back(job.status.job_id());
  return ids;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Runs `sql` on the file through a connection of its own (as another tool would), returning the
// first column of the first row, if any.
std::string RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  std::string first;
  char* error = nullptr;
  int rc = sqlite3_exec(
      db, sql.c_str(),
      [](void* out, int columns, char** values, char**) {
        auto* s = static_cast<std::string*>(out);
        if (s->empty() && columns > 0 && values[0] != nullptr) *s = values[0];
        return 0;
      },
      &first, &error);
  EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (error != nullptr ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
  return first;
}

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(ringmaster::testing::TestTempDir(), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      std::remove((path_ + suffix).c_str());
    }
  }

  std::unique_ptr<JobStore> OpenStore() {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  std::string path_;
};

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

TEST_F(JobStoreTest, OpensInWalMode) {
  ASSERT_NE(OpenStore(), nullptr);
  EXPECT_EQ(RawSql(path_, "PRAGMA journal_mode"), "wal");
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

TEST_F(JobStoreTest, GarbageFileIsDataLossAndLeftUntouched) {
  std::string garbage;
  for (int i = 0; i < 200; ++i) garbage += "this is not a database, just a file of text\n";
  {
    std::ofstream out(path_, std::ios::binary);
    out << garbage;
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));
  EXPECT_EQ(ReadFile(path_), garbage);
}

TEST_F(JobStoreTest, ShortGarbageFileIsDataLoss) {
  {
    std::ofstream out(path_, std::ios::binary);
    out << "hi";
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_EQ(ReadFile(path_), "hi");
}

TEST_F(JobStoreTest, OtherSqliteDatabaseIsRefusedAndLeftUntouched) {
  RawSql(path_, "CREATE TABLE customers (name TEXT); INSERT INTO customers VALUES ('x')");
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("not a Ringmaster job store"));
  EXPECT_EQ(RawSql(path_, "PRAGMA journal_mode"), "delete");
  EXPECT_EQ(RawSql(path_, "SELECT COUNT(*) FROM sqlite_master"), "1");
}

TEST_F(JobStoreTest, NewerSchemaIsFailedPrecondition) {
  ASSERT_NE(OpenStore(), nullptr);
  RawSql(path_, "PRAGMA user_version = 99");
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("99"));
}

TEST_F(JobStoreTest, MissingDirectoryIsUnavailable) {
  absl::StatusOr<std::unique_ptr<JobStore>> store =
      JobStore::Open(path_ + ".does-not-exist/state.db");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("does-not-exist"));
}

TEST_F(JobStoreTest, TruncatedStatusBlobIsDataLossNamingTheJob) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutJob(FullStatus("good", 1)).ok());
    ASSERT_TRUE(store->PutJob(FullStatus("broken-job", 2)).ok());
  }
  // Cuts the last byte of "alice" (owner): its length prefix then runs past the end.
  RawSql(path_,
         "UPDATE jobs SET status = substr(status, 1, length(status) - 1) "
         "WHERE job_id = 'broken-job'");
  std::unique_ptr<JobStore> store = OpenStore();  // The file itself is sound.
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kDataLoss) << jobs.status();
  EXPECT_THAT(jobs.status().message(), HasSubstr("broken-job"));
}

TEST_F(JobStoreTest, CorruptEventBlobIsDataLossNamingTheJob) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutJobWithEvents(FullStatus("evjob", 1), {Event(1), Event(2)}).ok());
  }
  RawSql(path_, "UPDATE events SET event = X'FFFFFFFFFF' WHERE job_id = 'evjob' AND sequence = 2");
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kDataLoss) << jobs.status();
  EXPECT_THAT(jobs.status().message(), HasSubstr("evjob"));
}

TEST_F(JobStoreTest, DamagedDatabasePageIsDataLoss) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(store->PutJob(FullStatus(absl::StrCat("job-", i), i)).ok());
    }
  }  // Closing checkpoints the WAL into the main file.
  ASSERT_FALSE(FileExists(path_ + "-wal"));
  std::string bytes = ReadFile(path_);
  ASSERT_GT(bytes.size(), 3 * 4096);
  // Overwrites the second page (a b-tree page) with garbage, keeping the header page intact.
  for (size_t i = 4096; i < 2 * 4096; ++i) bytes[i] = static_cast<char>(0xA5);
  {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
  absl::Status status = store.ok() ? (*store)->LoadAll().status() : store.status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
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

// The child of CommittedWritesSurviveSigkill: writes `jobs` jobs through every mutating call, then
// kills itself with SIGKILL without closing the store. Exits with a code naming the failed step
// instead (never returns).
[[noreturn]] void WriteThenDie(const std::string& path, int jobs) {
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path);
  if (!store.ok()) _exit(10);
  for (int i = 0; i < jobs; ++i) {
    std::string id = absl::StrCat("job-", i);
    v1::JobStatus status = FullStatus(id, i);
    status.set_state(v1::JOB_STATE_PENDING);
    if (!(*store)->CreateJob(status, {Event(1, "submitted")}, absl::StrCat("req-", i)).ok()) {
      _exit(11);
    }
    if (!(*store)->AppendEvent(id, Event(2, "placed")).ok()) _exit(12);
    status.set_state(v1::JOB_STATE_RUNNING);
    if (!(*store)->PutJobWithEvents(status, {Event(3, "state")}).ok()) _exit(13);
  }
  kill(getpid(), SIGKILL);
  _exit(14);  // Not reached.
}

TEST_F(JobStoreTest, CommittedWritesSurviveSigkill) {
  constexpr int kJobs = 25;
  pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) WriteThenDie(path_, kJobs);

  int wait_status = 0;
  bool exited = ringmaster::testing::WaitFor(
      [&] { return waitpid(child, &wait_status, WNOHANG) == child; }, absl::Seconds(60));
  if (!exited) {
    kill(child, SIGKILL);
    waitpid(child, &wait_status, 0);
    FAIL() << "the writer did not finish in time";
  }
  ASSERT_TRUE(WIFSIGNALED(wait_status))
      << "the writer exited with code " << WEXITSTATUS(wait_status) << " instead";
  ASSERT_EQ(WTERMSIG(wait_status), SIGKILL);
  // Killed with the connection open: the data is only in the WAL, and reopening must recover it.
  EXPECT_TRUE(FileExists(path_ + "-wal"));

  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), kJobs);
  for (int i = 0; i < kJobs; ++i) {
    const StoredJob& job = (*jobs)[i];
    EXPECT_EQ(job.status.job_id(), absl::StrCat("job-", i));
    EXPECT_EQ(job.status.state(), v1::JOB_STATE_RUNNING);
    ASSERT_EQ(job.events.size(), 3);
    EXPECT_EQ(job.events[0].kind(), "submitted");
    EXPECT_EQ(job.events[1].kind(), "placed");
    EXPECT_EQ(job.events[2].kind(), "state");
    absl::StatusOr<std::optional<std::string>> found = store->FindRequest(absl::StrCat("req-", i));
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(*found, std::optional<std::string>(absl::StrCat("job-", i)));
  }
}

v1::NodeCordon MakeCordon(const std::string& reason, const std::string& by) {
  v1::NodeCordon c;
  c.set_reason(reason);
  c.set_by(by);
  c.set_since_unix_nanos(1234567890);
  return c;
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

TEST_F(JobStoreTest, VersionOneFileGainsTheCordonTableAndKeepsItsJobs) {
  // A version 1 file, as that release wrote it: no node_cordons table, nor version 3's.
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutJob(FullStatus("old-job", 1)).ok());
  }
  RawSql(path_,
         "DROP TABLE node_cordons; DROP TABLE used_job_ids; DROP INDEX requests_by_job; "
         "DROP TABLE node_identities; PRAGMA user_version = 1");
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawSql(path_, "PRAGMA user_version"), "4");
  EXPECT_EQ(*store->JobIdUsed("old-job"), true);  // its jobs' ids count as used
  auto jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1);
  EXPECT_EQ((*jobs)[0].status.job_id(), "old-job");
  ASSERT_TRUE(store->PutCordon("node-a", MakeCordon("r", "")).ok());
  auto cordons = store->LoadCordons();
  ASSERT_TRUE(cordons.ok()) << cordons.status();
  EXPECT_EQ(cordons->size(), 1);
}

TEST_F(JobStoreTest, VersionTwoFileGainsTheUsedJobIds) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateJob(FullStatus("v2-job", 1), {Event(1)}, "req").ok());
  }
  RawSql(path_,
         "DROP TABLE used_job_ids; DROP INDEX requests_by_job; DROP TABLE node_identities; "
         "PRAGMA user_version = 2");
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawSql(path_, "PRAGMA user_version"), "4");
  EXPECT_EQ(*store->JobIdUsed("v2-job"), true);
  EXPECT_EQ(*store->FindRequest("req"), std::optional<std::string>("v2-job"));
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

TEST_F(JobStoreTest, VersionThreeFileGainsTheNodeIdentities) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->CreateJob(FullStatus("v3-job", 1), {Event(1)}, "").ok());
    ASSERT_TRUE(store->PutCordon("node-a", MakeCordon("r", "")).ok());
  }
  RawSql(path_, "DROP TABLE node_identities; PRAGMA user_version = 3");
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RawSql(path_, "PRAGMA user_version"), "4");
  EXPECT_EQ(*store->JobIdUsed("v3-job"), true);
  EXPECT_EQ(store->LoadCordons()->size(), 1);
  EXPECT_TRUE(store->LoadNodeIdentities()->empty());
  ASSERT_TRUE(store->PutNodeIdentity("node-a", "agents").ok());
  EXPECT_EQ(store->LoadNodeIdentities()->size(), 1);
}

TEST_F(JobStoreTest, CorruptCordonIsDataLossNamingTheNode) {
  {
    std::unique_ptr<JobStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutCordon("node-z", MakeCordon("reason", "alice")).ok());
  }
  RawSql(path_, "UPDATE node_cordons SET cordon = X'FFFFFFFFFF' WHERE node = 'node-z'");
  std::unique_ptr<JobStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto cordons = store->LoadCordons();
  ASSERT_FALSE(cordons.ok());
  EXPECT_EQ(cordons.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(cordons.status().message(), HasSubstr("node-z"));
}

}  // namespace
}  // namespace ringmaster::coordinator
