// The coordinator's durable state, as an interface: what the job manager and node identities
// store and what a restarted coordinator reads back. Implementations: SqliteJobStore
// (job_store_sqlite.h, the one the coordinator runs) and, for tests, FaultInjectingJobStore
// (testing/fault_injecting_job_store.h), which wraps another store and makes its writes fail, wait
// or stop as a crash would (leveldb's Env and db/fault_injection_test.cc are the model).
//
// Threading: every implementation is thread-safe; a call may block (on disk, on a lock another
// process holds) and callers may hold their own lock across it.
// Ownership: the caller owns the store; it borrows nothing from its arguments past a call.
// Errors (every implementation): INVALID_ARGUMENT / FAILED_PRECONDITION / NOT_FOUND /
// ALREADY_EXISTS as each method says; DATA_LOSS when what is stored cannot be read back (naming the
// job or node); UNAVAILABLE or RESOURCE_EXHAUSTED when the storage refuses a call for now (locked,
// full, failing): the caller may write the same thing again later.
// Durability: each mutating call is all-or-nothing and durable once it returns OK, so a crash
// after a call returns loses nothing that call wrote. Nothing here is called per heartbeat;
// callers write only on job transitions and events.
#ifndef RINGMASTER_COORDINATOR_JOB_STORE_H_
#define RINGMASTER_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ringmaster/v1/coordinator.pb.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::coordinator {

struct StoredJob {
  v1::JobStatus status;
  std::deque<v1::JobEvent> events;  // The newest (LoadAll's limit), ascending sequence.
  int64_t event_count = 0;          // The job's events in all: the newest one's sequence.
};

class JobStore {
 public:
  // Opens the SQLite store at `path` (SqliteJobStore::Open, which documents its errors).
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  virtual ~JobStore() = default;

  // Inserts or replaces the job's status (keyed by status.job_id(), which must be non-empty, else
  // INVALID_ARGUMENT).
  virtual absl::Status PutJob(const v1::JobStatus& status) = 0;

  // Appends an event; event.sequence() must be the job's next sequence (1 + the last stored),
  // else FAILED_PRECONDITION (so a duplicated or reordered append cannot corrupt the log).
  // NOT_FOUND if the job was never put.
  virtual absl::Status AppendEvent(const std::string& job_id, const v1::JobEvent& event) = 0;

  // Stores the job status and appends events in one transaction (for state transitions). Events
  // follow AppendEvent's sequence rule; if one breaks it, nothing is written.
  virtual absl::Status PutJobWithEvents(const v1::JobStatus& status,
                                        const std::vector<v1::JobEvent>& events) = 0;

  // Every job with its newest `newest_events` events (each one read and checked, the older ones
  // then dropped), in the order jobs were first stored (the job manager stores a job when it is
  // submitted, so this is submission order, whatever the wall clock did). DATA_LOSS, naming the
  // job, if a stored status or event does not parse or the event log has a gap.
  virtual absl::StatusOr<std::vector<StoredJob>> LoadAll(size_t newest_events = SIZE_MAX) = 0;

  // The job's events with after_sequence < sequence <= up_to_sequence, ascending. DATA_LOSS if
  // one does not parse or one of them is missing.
  virtual absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                               int64_t after_sequence,
                                                               int64_t up_to_sequence) = 0;

  // The job id that SubmitJob `request_id` created (see CreateJob), or nullopt (always for an
  // empty request id).
  virtual absl::StatusOr<std::optional<std::string>> FindRequest(const std::string& request_id) = 0;

  // Stores a new job, its first events and (if non-empty) its request id, in one transaction.
  // ALREADY_EXISTS if the request id was used before (the caller then returns that job);
  // FAILED_PRECONDITION if a job with this id is already stored. On error nothing is written.
  virtual absl::Status CreateJob(const v1::JobStatus& status,
                                 const std::vector<v1::JobEvent>& events,
                                 const std::string& request_id) = 0;

  // Deletes the jobs with their events and request ids, in one transaction (a job not stored is
  // skipped). On error nothing is deleted. Their ids stay used (JobIdUsed).
  virtual absl::Status DeleteJobs(const std::vector<std::string>& job_ids) = 0;
  // Whether a job with this id was ever stored, deleted since or not: agents remember a job id's
  // generations, so an id must never name another job.
  virtual absl::StatusOr<bool> JobIdUsed(const std::string& job_id) = 0;

  // Stores (or replaces) the cordon of `node`, or removes it (nullopt; a no-op if there is none).
  // INVALID_ARGUMENT for an empty node name.
  virtual absl::Status PutCordon(const std::string& node,
                                 const std::optional<v1::NodeCordon>& cordon) = 0;
  // Every stored cordon by node name, sorted by name. DATA_LOSS, naming the node, if one does not
  // parse.
  virtual absl::StatusOr<std::vector<std::pair<std::string, v1::NodeCordon>>> LoadCordons() = 0;

  // Binds `node` to the agent identity (replacing any binding), or removes its binding (nullopt;
  // a no-op if there is none). INVALID_ARGUMENT for an empty node name or identity.
  virtual absl::Status PutNodeIdentity(const std::string& node,
                                       const std::optional<std::string>& identity) = 0;
  // Every binding as (node, identity), sorted by node name.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LoadNodeIdentities() = 0;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_STORE_H_
