// Durable coordinator state in SQLite (WAL mode) under the --state path.
//
// What is stored: every job's JobStatus (spec, state, generation, assignments, groups, plan,
// owner, times) as a serialized proto with the indexed columns job_id/state/submit time, the
// job's append-only events, SubmitJob request ids (for idempotent retries), and the cordoned
// nodes (schema version 2), every job id ever used (version 3), and the agent identity each node
// name is bound to (version 4); an older file gains what it lacks when opened.
//
// Durability: each mutating call is one transaction, committed before it returns
// (synchronous=FULL in WAL mode), so a SIGKILL after a call returns loses nothing that call wrote.
// Nothing here is called per heartbeat; callers write only on job transitions and events.
//
// Thread-safety: all methods are thread-safe (one connection guarded by a mutex).
#ifndef RINGMASTER_COORDINATOR_JOB_STORE_H_
#define RINGMASTER_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/ringmaster/v1/coordinator.pb.h"
#include "proto/ringmaster/v1/job.pb.h"

struct sqlite3;

namespace ringmaster::coordinator {

struct StoredJob {
  v1::JobStatus status;
  std::deque<v1::JobEvent> events;  // The newest (LoadAll's limit), ascending sequence.
  int64_t event_count = 0;          // The job's events in all: the newest one's sequence.
};

class JobStore {
 public:
  // Opens (creating if needed) the database at `path` (a file; its directory must exist).
  // Errors: UNAVAILABLE if it cannot be opened, DATA_LOSS if it is not a Ringmaster database or
  // is corrupt, FAILED_PRECONDITION if its schema version is newer than this binary knows.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();

  // Inserts or replaces the job's status (keyed by status.job_id(), which must be non-empty, else
  // INVALID_ARGUMENT).
  absl::Status PutJob(const v1::JobStatus& status);

  // Appends an event; event.sequence() must be the job's next sequence (1 + the last stored),
  // else FAILED_PRECONDITION (so a duplicated or reordered append cannot corrupt the log).
  // NOT_FOUND if the job was never put.
  absl::Status AppendEvent(const std::string& job_id, const v1::JobEvent& event);

  // Stores the job status and appends events in one transaction (for state transitions). Events
  // follow AppendEvent's sequence rule; if one breaks it, nothing is written.
  absl::Status PutJobWithEvents(const v1::JobStatus& status,
                                const std::vector<v1::JobEvent>& events);

  // Every job with its newest `newest_events` events (each one read and checked, the older ones
  // then dropped), in the order jobs were first stored (the job manager stores a job when it is
  // submitted, so this is submission order, whatever the wall clock did). DATA_LOSS, naming the
  // job, if a stored status or event does not parse or the event log has a gap.
  absl::StatusOr<std::vector<StoredJob>> LoadAll(size_t newest_events = SIZE_MAX);

  // The job's events with after_sequence < sequence <= up_to_sequence, ascending. DATA_LOSS if
  // one does not parse or one of them is missing.
  absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                       int64_t after_sequence,
                                                       int64_t up_to_sequence);

  // The job id that SubmitJob `request_id` created (see CreateJob), or nullopt.
  absl::StatusOr<std::optional<std::string>> FindRequest(const std::string& request_id);

  // Stores a new job, its first events and (if non-empty) its request id, in one transaction.
  // ALREADY_EXISTS if the request id was used before (the caller then returns that job);
  // FAILED_PRECONDITION if a job with this id is already stored. On error nothing is written.
  absl::Status CreateJob(const v1::JobStatus& status, const std::vector<v1::JobEvent>& events,
                         const std::string& request_id);

  // Deletes the jobs with their events and request ids, in one transaction (a job not stored is
  // skipped). On error nothing is deleted. Their ids stay used (JobIdUsed).
  absl::Status DeleteJobs(const std::vector<std::string>& job_ids);
  // Whether a job with this id was ever stored, deleted since or not: agents remember a job id's
  // generations, so an id must never name another job.
  absl::StatusOr<bool> JobIdUsed(const std::string& job_id);

  // Stores (or replaces) the cordon of `node`, or removes it (nullopt; a no-op if there is none).
  // INVALID_ARGUMENT for an empty node name.
  absl::Status PutCordon(const std::string& node, const std::optional<v1::NodeCordon>& cordon);
  // Every stored cordon by node name, sorted by name. DATA_LOSS, naming the node, if one does not
  // parse.
  absl::StatusOr<std::vector<std::pair<std::string, v1::NodeCordon>>> LoadCordons();

  // Binds `node` to the agent identity (replacing any binding), or removes its binding (nullopt;
  // a no-op if there is none). INVALID_ARGUMENT for an empty node name or identity.
  absl::Status PutNodeIdentity(const std::string& node,
                               const std::optional<std::string>& identity);
  // Every binding as (node, identity), sorted by node name.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LoadNodeIdentities();

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_STORE_H_
