// JobManager's internals shared by its translation units (job_manager.cc, and
// job_manager_watchdog.cc for the watchdog): the state kept per job (JobManager::Job) and the
// helpers both files use. Not part of the job manager's interface: only those two files include
// it. Guarded by JobManager::mu_ like the rest of the manager's state.
#ifndef RINGMASTER_COORDINATOR_JOB_MANAGER_INTERNAL_H_
#define RINGMASTER_COORDINATOR_JOB_MANAGER_INTERNAL_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/hang_analysis.h"
#include "coordinator/job_manager.h"
#include "coordinator/link_analysis.h"
#include "coordinator/placement.h"
#include "coordinator/recovery_tracker.h"
#include "coordinator/straggler_detector.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {
namespace job_manager_internal {

// The job's parallel layout: its spec's degrees, or its plan's where the spec left them to the
// planner.
Layout LayoutOf(const v1::JobStatus& status);

// "rank R on N was killed by signal S" or "... exited with code C", and why, as its agent tells
// it: the worker's own reason or its last output (bounded again here: an agent's text is input).
std::string DescribeExit(const std::string& node, const v1::WorkerState& state);

}  // namespace job_manager_internal

struct JobManager::Job {
  v1::JobStatus status;
  // The newest events, ascending: at most options.events_in_memory of the stored ones (older
  // ones are in the store only), then any not stored yet.
  std::deque<v1::JobEvent> events;
  int64_t last_sequence = 0;    // the newest event's
  int64_t stored_sequence = 0;  // the newest stored event's
  // The last store write failed: Tick writes the job again (not before `retry_persist_at`).
  bool unsaved = false;
  absl::Time retry_persist_at = absl::InfinitePast();
  // The current generation's runtime state (reset at every launch).
  std::set<int> finished_ranks;
  std::vector<int64_t> rank_step;
  std::vector<double> rank_tokens_per_second;
  bool progress_dirty = false;
  absl::Time last_progress_push;
  // A recovered running job's ranks that no registration has reported yet (running, or exited),
  // by node.
  std::map<std::string, std::set<int>> awaiting;
  std::map<uint64_t, WatchCallback> watchers;
  // Watchdog state of the current generation.
  std::map<int, RankCollectives> collectives;  // last reported sequence numbers, by rank
  // When each rank's last summary arrived, or, after a coordinator restart, when its node
  // registered again listing it running (a stopped rank sends nothing more and must still count
  // as silent).
  std::map<int, absl::Time> last_heard;
  // When this coordinator began to hear the current generation's ranks: for a recovered job, the
  // latest re-registration of one of its nodes (InfinitePast otherwise). A hang reported sooner
  // than kHangEvidenceWait after it waits for evidence, however long ago the hang began.
  absl::Time heard_from = absl::InfinitePast();
  std::unique_ptr<StragglerDetector> stragglers;
  std::set<int> straggler_series;  // ranks with a ringmaster_straggler series
  std::set<int> hang_suspects;     // ranks with a ringmaster_hang_suspect series
  absl::Time hang_suspects_until = absl::InfiniteFuture();  // their removal, once recovered
  // A hang report waiting for evidence of whom to blame (kHangEvidenceWait): its node, the
  // report, and when the hang began.
  struct PendingHang {
    std::string node;
    v1::WorkerState state;
    absl::Time began;
    absl::Time decide_by;  // blame whoever the evidence names by then
  };
  std::optional<PendingHang> pending_hang;
  // The ranks the last declared hang blamed and the generation that hung: their exits (the
  // agents stop them) get a "suspect_exit" event with why they ended, so their last output.
  // Replaced by the next hang's.
  int64_t hang_generation = 0;
  std::set<int> suspects_to_quote;
  bool recovery_series = false;  // ringmaster_recovery_seconds exported
  bool resumed = false;          // the reference rank's start step reached the goodput
  RecoveryTracker recovery;
  // Failures attributed to the same node in a row, and the nodes excluded for it.
  std::string last_failed_node;
  int failure_streak = 0;
  std::set<std::string> excluded;
  // The newest checkpoint step any generation reported, and when it was first reported: a new
  // generation's ranks report the checkpoint they resumed from, which is not a new one.
  int64_t newest_checkpoint_step = -1;
  absl::Time last_checkpoint_time = absl::InfinitePast();
  // The newest committed checkpoint when the current generation was launched (reported, or
  // stored with the previous generation's progress after a coordinator restart): where it
  // should resume.
  int64_t checkpoint_at_launch = -1;
  // The furthest step a rank of the current generation reported (its summaries, its exit).
  int64_t furthest_step = 0;
  // What the job had when the current generation was launched, for StepsLost: the step its
  // predecessor trained to (that of the latest generation that stepped; 0 before any did), and
  // the saves that had failed since the newest committed checkpoint (how many, the last one's
  // step and error).
  struct AtLaunch {
    int64_t trained = 0;
    int64_t failures = 0;
    int64_t last_failed = 0;
    std::string last_error;
  };
  AtLaunch at_launch;
  // The step the current generation resumed from (rank 0's report; 0 until then).
  int64_t generation_start_step = 0;
  // StepsLost() of the current generation, said by its "recovered" event.
  std::string steps_lost;
  // Checkpoints that could not be saved: the newest step counted in the current generation (its
  // ranks' reports of it, or of older ones, are not counted again), those since the newest
  // committed checkpoint (across generations), and the latest one's step, error and its
  // error's kind (digits elided: the event is repeated when the kind changes).
  int64_t failed_checkpoint_step = 0;
  int64_t checkpoint_failures = 0;
  int64_t last_failed_checkpoint = 0;
  int64_t last_failed_generation = 0;
  std::string last_checkpoint_error;
  std::string last_checkpoint_error_kind;
  // Crash-loop backoff and drain waits (whether the current generation stepped, and the failures
  // in a row of generations that did not, are in the status): when the next launch may happen.
  absl::Time launch_not_before = absl::InfinitePast();
  // The current generation's latest link check (made by its first report; a later step's
  // replaces it), each rank's start-up check seconds (a recovery phase), and the label values of
  // the latest verdict's series.
  std::unique_ptr<LinkCheckCollector> link_check;
  std::map<int, double> start_link_check_seconds;
  std::vector<std::vector<std::string>> slow_link_series, link_bandwidth_series;
  // While its ringmaster_job_failed_timestamp_seconds is exported: until when.
  absl::Time failed_series_until = absl::InfinitePast();
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_MANAGER_INTERNAL_H_
