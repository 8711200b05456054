// The JobStore the coordinator runs: SQLite (WAL mode) under the --state path.
//
// What is stored: every job's JobStatus (spec, state, generation, assignments, groups, plan,
// owner, times) as a serialized proto with the indexed columns job_id/state/submit time, the
// job's append-only events, SubmitJob request ids (for idempotent retries), and the cordoned
// nodes (schema version 2), every job id ever used (version 3), and the agent identity each node
// name is bound to (version 4); an older file gains what it lacks when opened.
//
// Durability: each mutating call is one transaction, committed before it returns
// (synchronous=FULL in WAL mode), so a SIGKILL after a call returns loses nothing that call wrote.
//
// Threading: all methods are thread-safe (one connection guarded by a mutex). Another process
// with the file open can hold its lock: a call then waits for it up to a 5 s busy timeout, and
// then fails with UNAVAILABLE.
// Ownership: the store owns its connection and closes it when destroyed.
// Errors: JobStore's contract; SQLite's result codes map to DATA_LOSS (corrupt, not a database),
// UNAVAILABLE (cannot open, busy, locked, I/O error, read-only), RESOURCE_EXHAUSTED (disk full,
// no memory) and INTERNAL (anything else), the message naming the call and SQLite's text.
#ifndef RINGMASTER_COORDINATOR_JOB_STORE_SQLITE_H_
#define RINGMASTER_COORDINATOR_JOB_STORE_SQLITE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/job_store.h"

struct sqlite3;

namespace ringmaster::coordinator {

class SqliteJobStore : public JobStore {
 public:
  // Opens (creating if needed) the database at `path` (a file; its directory must exist).
  // Errors: UNAVAILABLE if it cannot be opened, DATA_LOSS if it is not a Ringmaster database or
  // is corrupt, FAILED_PRECONDITION if its schema version is newer than this binary knows.
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& path);
  ~SqliteJobStore() override;

  absl::Status PutJob(const v1::JobStatus& status) override;
  absl::Status AppendEvent(const std::string& job_id, const v1::JobEvent& event) override;
  absl::Status PutJobWithEvents(const v1::JobStatus& status,
                                const std::vector<v1::JobEvent>& events) override;
  absl::StatusOr<std::vector<StoredJob>> LoadAll(size_t newest_events = SIZE_MAX) override;
  absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                       int64_t after_sequence,
                                                       int64_t up_to_sequence) override;
  absl::StatusOr<std::optional<std::string>> FindRequest(const std::string& request_id) override;
  absl::Status CreateJob(const v1::JobStatus& status, const std::vector<v1::JobEvent>& events,
                         const std::string& request_id) override;
  absl::Status DeleteJobs(const std::vector<std::string>& job_ids) override;
  absl::StatusOr<bool> JobIdUsed(const std::string& job_id) override;
  absl::Status PutCordon(const std::string& node,
                         const std::optional<v1::NodeCordon>& cordon) override;
  absl::StatusOr<std::vector<std::pair<std::string, v1::NodeCordon>>> LoadCordons() override;
  absl::Status PutNodeIdentity(const std::string& node,
                               const std::optional<std::string>& identity) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LoadNodeIdentities() override;

 private:
  explicit SqliteJobStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_STORE_SQLITE_H_
