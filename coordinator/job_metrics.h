// The job manager's metric families and each job's series: which families exist, what a job's
// series are set to, and their removal when the job ends (bounded cardinality).
//
// Threading: not synchronised itself (the families are); the job manager calls it under its job
// lock, and each job's JobSeries is guarded like the job. Ownership: the families belong to the
// registry, which must outlive this; a null registry makes every method a no-op (and `enabled()`
// false), which the job manager relies on to skip work no series would show. Errors: none (the
// registry aborts on a programmer error, a name reused with another shape).
#ifndef RINGMASTER_COORDINATOR_JOB_METRICS_H_
#define RINGMASTER_COORDINATOR_JOB_METRICS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/metrics/registry.h"
#include "coordinator/recovery_tracker.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {

// The series of one job whose labels go beyond its id, kept so that they can be removed: owned by
// the job, changed only through JobMetrics.
struct JobSeries {
  std::set<int> stragglers;     // ranks with a ringmaster_straggler series
  std::set<int> hang_suspects;  // ranks with a ringmaster_hang_suspect series
  bool recovery = false;        // ringmaster_recovery_seconds exported
  // The label values of the latest link verdict's series.
  std::vector<std::vector<std::string>> slow_links, link_bandwidth;
  // While its ringmaster_job_failed_timestamp_seconds is exported: until when.
  absl::Time failed_until = absl::InfinitePast();
};

class JobMetrics {
 public:
  // Jobs by state, indexed by v1::JobState.
  using StateCounts = std::array<int, v1::JOB_STATE_CANCELLED + 1>;

  // Registers the families in `registry` (null: none, every method does nothing).
  explicit JobMetrics(metrics::Registry* registry);
  JobMetrics(const JobMetrics&) = delete;
  JobMetrics& operator=(const JobMetrics&) = delete;

  // Whether the families exist.
  bool enabled() const { return jobs_by_state_ != nullptr; }

  // Coordinator-wide: ringmaster_jobs{state}, ringmaster_jobs_submitted_total,
  // ringmaster_store_write_errors_total, ringmaster_scheduling_pass_seconds.
  void SetJobsByState(const StateCounts& counts);
  void CountSubmitted();
  void CountStoreWriteError();
  void ObserveSchedulingPass(absl::Duration took);
  // ringmaster_devices_held{job_id,state} of the hold `job_id` ("" for none), replacing the
  // series of `previous_job` ("" for none) if it is another job.
  void SetHold(const std::string& previous_job, const std::string& job_id, int idle, int busy);

  // A job that has not ended: its counters created at 0, so that a rate or increase() sees its
  // first restart or hang too (the checkpoint failures' only with `checkpoints`: a checkpoint.dir).
  void StartJob(const std::string& job_id, bool checkpoints);
  // The job ended: every job-level series of it is removed, counters and `series` included (but
  // the failure's, ringmaster_job_failed_timestamp_seconds, which outlives it).
  void ForgetJob(const std::string& job_id, JobSeries* series);

  void CountRestart(const std::string& job_id);
  void CountHang(const std::string& job_id);
  void CountResumeBehind(const std::string& job_id);
  void CountCheckpointFailure(const std::string& job_id);

  // ringmaster_straggler{job_id,rank}: 1 flagged, 0 cleared.
  void SetStraggler(const std::string& job_id, int rank, bool flagged, JobSeries* series);
  // ringmaster_hang_suspect: `ranks` replace the job's previous suspects (also in
  // series->hang_suspects, only while enabled).
  void SetHangSuspects(const std::string& job_id, const std::vector<int>& ranks, JobSeries* series);
  void ClearHangSuspects(const std::string& job_id, JobSeries* series);
  // ringmaster_recovery_seconds{job_id,phase}.
  void SetRecovery(const std::string& job_id, const RecoveryPhases& phases, JobSeries* series);
  // The running job's gauges pushed once a second: goodput, step, tokens per second.
  void SetProgress(const std::string& job_id, double goodput, int64_t step,
                   double tokens_per_second);
  // The checkpoint gauges (the job manager decides which apply; job_manager_checkpoints.cc).
  void SetCheckpointStep(const std::string& job_id, int64_t step);
  void SetCheckpointTime(const std::string& job_id, absl::Time when);
  void SetStepsSinceCheckpoint(const std::string& job_id, int64_t steps);
  void SetCheckpointInterval(const std::string& job_id, int64_t steps);
  // ringmaster_job_data_parallel{job_id,which}: the current generation's data-parallel degree
  // and the one the job asks for (an elastic job's differ while it runs on fewer nodes).
  void SetDataParallel(const std::string& job_id, int current, int desired);

  // ringmaster_slow_link for one slow or corrupting link (its bandwidth over its kind's median,
  // or 0 without one).
  void AddSlowLink(const std::string& job_id, const v1::LinkState& link, JobSeries* series);
  // ringmaster_link_bandwidth_bytes_per_second of a complete check's link classes.
  void SetLinkBandwidth(const std::string& job_id, const v1::LinkCheckSummary& summary,
                        JobSeries* series);
  // Removes the series of the job's latest link verdict.
  void ForgetLinks(JobSeries* series);

  // ringmaster_job_failed_timestamp_seconds of a job that failed at `failed`, until `until`
  // (series->failed_until).
  void SetFailed(const std::string& job_id, absl::Time failed, absl::Time until, JobSeries* series);
  // Removes it (its time is up, or the job is deleted); nothing if it is not exported.
  void ForgetFailed(const std::string& job_id, JobSeries* series);

 private:
  metrics::GaugeFamily* jobs_by_state_ = nullptr;
  metrics::CounterFamily* restarts_ = nullptr;
  metrics::CounterFamily* hangs_ = nullptr;
  metrics::CounterFamily* resumes_behind_ = nullptr;
  metrics::GaugeFamily* stragglers_ = nullptr;
  metrics::GaugeFamily* held_devices_ = nullptr;
  metrics::GaugeFamily* hang_suspects_ = nullptr;
  metrics::GaugeFamily* recovery_seconds_ = nullptr;
  metrics::GaugeFamily* goodput_ = nullptr;
  metrics::GaugeFamily* job_step_ = nullptr;
  metrics::GaugeFamily* job_tokens_per_second_ = nullptr;
  metrics::GaugeFamily* job_checkpoint_step_ = nullptr;
  metrics::GaugeFamily* job_checkpoint_time_ = nullptr;
  metrics::CounterFamily* checkpoint_failures_ = nullptr;
  metrics::GaugeFamily* steps_since_checkpoint_ = nullptr;
  metrics::GaugeFamily* checkpoint_interval_steps_ = nullptr;
  metrics::GaugeFamily* slow_links_ = nullptr;
  metrics::GaugeFamily* link_bandwidth_ = nullptr;
  metrics::GaugeFamily* job_failed_ = nullptr;
  metrics::GaugeFamily* data_parallel_ = nullptr;
  std::shared_ptr<metrics::Counter> submitted_;
  std::shared_ptr<metrics::Counter> store_errors_;
  std::shared_ptr<metrics::Histogram> scheduling_pass_seconds_;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_METRICS_H_
