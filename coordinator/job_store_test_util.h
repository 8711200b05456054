// Helpers the JobStore tests share (job_store_test.cc: the contract; job_store_sqlite_test.cc:
// the SQLite file): full statuses and events to store, a raw SQL connection to the file, and the
// fixture that opens a store at a fresh path of the test's own.
// Threading: test-only helpers, each used on one thread. Ownership: OpenStore's store is the
// caller's. Errors: failures are reported as googletest failures.
#ifndef RINGMASTER_COORDINATOR_JOB_STORE_TEST_UTIL_H_
#define RINGMASTER_COORDINATOR_JOB_STORE_TEST_UTIL_H_

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/subprocess.h"
#include "coordinator/job_store.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {

inline ::testing::AssertionResult SameProto(const google::protobuf::Message& actual,
                                            const google::protobuf::Message& expected) {
  if (google::protobuf::util::MessageDifferencer::Equals(actual, expected)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got:\n"
                                       << actual.DebugString() << "want:\n"
                                       << expected.DebugString();
}

// A status with every part filled: spec (with a map), assignments, groups, plan and progress.
inline v1::JobStatus FullStatus(const std::string& job_id, int64_t submit_time) {
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

inline v1::JobEvent Event(int64_t sequence, const std::string& kind = "state") {
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

inline std::vector<std::string> JobIds(const std::vector<StoredJob>& jobs) {
  std::vector<std::string> ids;
  for (const StoredJob& job : jobs) ids.push_back(job.status.job_id());
  return ids;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

inline bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Runs `sql` on the file through a connection of its own (as another tool would), returning the
// first column of the first row, if any.
inline std::string RawSql(const std::string& path, const std::string& sql) {
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

inline v1::NodeCordon MakeCordon(const std::string& reason, const std::string& by) {
  v1::NodeCordon c;
  c.set_reason(reason);
  c.set_by(by);
  c.set_since_unix_nanos(1234567890);
  return c;
}

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_STORE_TEST_UTIL_H_
