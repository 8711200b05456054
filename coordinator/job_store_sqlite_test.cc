// SqliteJobStore's file: WAL mode, files that are not a Ringmaster store (left untouched),
// damaged rows and pages (DATA_LOSS naming what), older schema versions (migrated), and committed
// writes surviving a SIGKILL. The JobStore contract is job_store_test.cc's.
#include "coordinator/job_store_sqlite.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/wait.h"
#include "coordinator/job_store_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;

TEST_F(JobStoreTest, OpensInWalMode) {
  ASSERT_NE(OpenStore(), nullptr);
  EXPECT_EQ(RawSql(path_, "PRAGMA journal_mode"), "wal");
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
