// A JobStore for tests that wraps another one (usually a SqliteJobStore in the test's temporary
// directory) and, when told, makes its writes fail, wait, or stop as a crash would: leveldb's
// db/fault_injection_test.cc is the model. Told nothing, it passes every call through unchanged.
//
// Writes are PutJob, AppendEvent, PutJobWithEvents, CreateJob, DeleteJobs, PutCordon and
// PutNodeIdentity; the other calls are reads. Each write goes through these steps in order:
//   1. the hold: while HoldWrites is in force it waits (no sleeps: the test opens the hold);
//   2. the crash: once crashed, it fails with UNAVAILABLE ("the store crashed");
//   3. injected failures (FailNextWrites, then FailWrites): it fails with the status given (its
//      message prefixed "JobStore::<method>: ", as SqliteJobStore's), without reaching the
//      wrapped store;
//   4. the latency (SetWriteLatency): it advances the test's FakeClock, as a slow disk would;
//   5. the wrapped store, whose result it returns; then CrashAfterWrites counts it.
// Reads pass straight through, or fail with UNAVAILABLE once crashed.
//
// A crash closes (destroys) the wrapped store once no call is in it, so a test can then open the
// same file again, with a new JobManager, and see exactly what had landed before the crash.
//
// Threading: thread-safe; calls to the wrapped store run outside this object's lock, so a held
// write blocks only its own caller (and whatever lock that caller holds).
// Ownership: owns the wrapped store. Destroying this store opens the hold and waits for the calls
// in flight to return.
// Errors: the wrapped store's, the injected ones, and UNAVAILABLE once crashed.
#ifndef RINGMASTER_COORDINATOR_TESTING_FAULT_INJECTING_JOB_STORE_H_
#define RINGMASTER_COORDINATOR_TESTING_FAULT_INJECTING_JOB_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/job_store.h"

namespace ringmaster::coordinator {

// The JobStore methods that write.
enum class JobStoreWrite {
  kPutJob,
  kAppendEvent,
  kPutJobWithEvents,
  kCreateJob,
  kDeleteJobs,
  kPutCordon,
  kPutNodeIdentity,
};

// The method's name ("PutJobWithEvents"), for messages.
absl::string_view JobStoreWriteName(JobStoreWrite write);

class FaultInjectingJobStore : public JobStore {
 public:
  // The status injected failures return unless a test gives another: UNAVAILABLE, as SQLite's
  // busy timeout, a read-only or a failing disk give.
  static absl::Status InjectedFailure();

  explicit FaultInjectingJobStore(std::unique_ptr<JobStore> base);
  ~FaultInjectingJobStore() override;

  // Failures. The next `count` writes (of any method) fail with `status`.
  void FailNextWrites(int count, absl::Status status = InjectedFailure());
  // Every write of `method` (of any method: nullopt) fails with `status` until HealWrites.
  void FailWrites(std::optional<JobStoreWrite> method, absl::Status status = InjectedFailure());
  // Ends FailNextWrites and FailWrites: writes reach the wrapped store again.
  void HealWrites();

  // Latency. Each write that reaches the wrapped store first advances `clock` by `latency` (on
  // the writer's thread, before the write), as if it took that long; nullptr or zero: none.
  // `clock` must outlive this store.
  void SetWriteLatency(FakeClock* clock, absl::Duration latency);

  // Writes wait before doing anything until ReleaseWrites (a write already past the hold goes on).
  void HoldWrites();
  void ReleaseWrites();
  // Waits until at least `count` writes wait at the hold, or `timeout` of real time (a safety net:
  // a test waits for the condition, never for the time). Whether they do.
  bool AwaitHeldWrites(int count, absl::Duration timeout);

  // Crash. Once `count` more writes have reached the wrapped store (landed, or refused by it),
  // the store crashes: every later call fails with UNAVAILABLE and the wrapped store is closed as
  // soon as no call is in it (a write another thread already had in it still lands). 0 crashes
  // now.
  void CrashAfterWrites(int count);
  bool crashed() const;

  // What reached the wrapped store, in order (landed or refused by it; not the injected failures).
  std::vector<JobStoreWrite> writes() const;
  // The writes failed by injection so far.
  int64_t injected_failures() const;
  // Every write called so far, whatever became of it (held, failed, refused after the crash): a
  // test that simulates a process dying at its first write after the crash reads, at each thing
  // the process does, whether that write had come yet.
  int64_t write_attempts() const;

  // JobStore.
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
  // Runs `call` on the wrapped store through the steps above.
  absl::Status Write(JobStoreWrite write, const std::function<absl::Status(JobStore*)>& call);
  // The wrapped store for a read, counted in flight; nullptr once crashed.
  JobStore* BeginRead();
  // Ends a call begun by BeginRead or Write; closes the wrapped store after a crash once no call
  // is in it.
  void EndCall();
  template <typename T>
  absl::StatusOr<T> Read(const std::function<absl::StatusOr<T>(JobStore*)>& call);

  mutable absl::Mutex mu_;
  // Calls in flight use it outside the lock: it is reset only after a crash, once in_flight_ is 0.
  std::unique_ptr<JobStore> base_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  int held_ ABSL_GUARDED_BY(mu_) = 0;  // writes waiting at the hold
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int> writes_until_crash_ ABSL_GUARDED_BY(mu_);
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_next_status_ ABSL_GUARDED_BY(mu_);
  bool failing_ ABSL_GUARDED_BY(mu_) = false;                      // FailWrites is in force
  std::optional<JobStoreWrite> fail_method_ ABSL_GUARDED_BY(mu_);  // nullopt: every method
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
  FakeClock* latency_clock_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Duration latency_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::vector<JobStoreWrite> writes_ ABSL_GUARDED_BY(mu_);
  int64_t injected_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t write_attempts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_TESTING_FAULT_INJECTING_JOB_STORE_H_
