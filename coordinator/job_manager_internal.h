// JobManager's internals shared by its translation units (job_manager.cc: the state machine,
// submissions and queries; job_manager_tick.cc: the periodic duties; job_manager_scheduling.cc;
// job_manager_nodes.cc: node loss, drains and registrations; job_manager_watchdog.cc;
// job_manager_links.cc; job_manager_checkpoints.cc; job_manager_elastic.cc;
// job_manager_spares.cc): the state kept per job (JobManager::Job) and
// the helpers several of them use. Not part of the job manager's interface: only those files
// include it.
//
// Threading: every Job is guarded by JobManager::mu_ like the rest of the manager's state.
// Ownership: JobManager owns its Jobs (jobs_). Errors: none here.
#ifndef RINGMASTER_COORDINATOR_JOB_MANAGER_INTERNAL_H_
#define RINGMASTER_COORDINATOR_JOB_MANAGER_INTERNAL_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/generation_state.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_metrics.h"
#include "coordinator/launch_plan.h"
#include "coordinator/recovery_tracker.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {
namespace job_manager_internal {

// "rank R on N was killed by signal S" or "... exited with code C", and why, as its agent tells
// it: the worker's own reason or its last output (bounded again here: an agent's text is input).
std::string DescribeExit(const std::string& node, const v1::WorkerState& state);

// The job's nodes (those of its current assignments).
std::set<std::string> NodesOf(const v1::JobStatus& status);
// A running job with ranks on `node`.
bool RunsOn(const v1::JobStatus& status, const std::string& node);
// Whether `rank` is one of the job's ranks and placed on `node`: what an agent's report about a
// rank must be to count (a report about another node's rank, or none, is malformed).
bool RankIsOn(const v1::JobStatus& status, int rank, const std::string& node);
// A watch update with the job's state and generation; the caller adds the event or progress.
v1::WatchJobResponse UpdateOf(const v1::JobStatus& status);
// The ranks of `gen` not known to have reported nothing, for FindLaggards: those whose watch
// ended, and those on nodes a restarted coordinator awaits (job_manager_watchdog.cc).
std::set<int> UnknownRanks(const GenerationState& gen);
// A worker process's side thread reports every 0.5 s and its agent forwards at most one summary
// per second: a rank not heard of for kSilentProcess is stopped or stuck.
inline constexpr absl::Duration kSilentProcess = absl::Milliseconds(2500);
// Whether `rank`'s latest summary said it works outside any collective (StepSummary.working) and
// came within kSilentProcess of `now`: a frozen process works no more (job_manager_watchdog.cc).
bool WorksNow(const GenerationState& gen, int rank, absl::Time now);
// Each rank's RankLiveState.activity at `now` (hang_analysis.h's RankActivity), by rank (as many
// as gen.rank_step): a rank's numbers count as settled once they held kSettledNumbers, and only
// settled ranks are read for laggards, so a healthy job whose ranks were sampled a moment apart
// shows no wait (job_manager_watchdog.cc).
inline constexpr absl::Duration kSettledNumbers = absl::Seconds(3);
std::vector<std::string> ActivitiesOf(const GenerationState& gen, absl::Time now);

// How soon Tick writes a job again after its store write failed.
inline constexpr absl::Duration kPersistRetryInterval = absl::Seconds(1);

// A process stopped when the hang began is silent by kSilentProcess (job_manager_watchdog.cc)
// after its last summary arrived, and that summary can arrive up to a forwarding interval (1 s)
// after it stopped. A hang reported sooner after it began (a short watchdog.hang_timeout) with no
// rank to blame yet waits until then for the evidence before it falls back to naming the reported
// rank.
inline constexpr absl::Duration kHangEvidenceWait = absl::Milliseconds(2500 + 1500);

// Most "stack" events one hang adds (one per blamed rank that has a stack, in rank order).
inline constexpr int kMaxStackEventsPerHang = 8;

// A straggler is said to be input-bound when its wait for its next batch per step (the median
// of its GenerationState.input_seconds window) exceeds the median of its pipeline stage peers'
// by at least this share of its excess compute: its compute level (the straggler detector's, the
// median of the same window) less what `ratio`, that level over its peers', says they take.
inline constexpr double kInputCauseShare = 0.5;
// "; mostly waiting for input: 80 ms per step for its next batch (DataLoader), its peers 2 ms"
// when it is, else "" (also when no peer of its stage reported).
std::string InputCause(const v1::JobStatus& status, const GenerationState& gen, int rank,
                       double compute_level, double ratio);

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
  std::map<uint64_t, WatchCallback> watchers;
  // Progress changed since watchers last heard (at most once a second), and when they did.
  bool progress_dirty = false;
  absl::Time last_progress_push;

  // The current generation's state: replaced whole at every launch.
  GenerationState gen;
  // Its series with labels beyond the job id (removed when the job ends).
  JobSeries series;

  // When the hang suspects' series go, once the job recovered.
  absl::Time hang_suspects_until = absl::InfiniteFuture();
  // The ranks the last declared hang blamed and the generation that hung: their exits (the
  // agents stop them) get a "suspect_exit" event with why they ended, so their last output.
  // Replaced by the next hang's.
  int64_t hang_generation = 0;
  std::set<int> suspects_to_quote;
  RecoveryTracker recovery;
  // The slow links of the job's latest complete link check (any generation's): a later verdict
  // without one of them says it recovered.
  std::vector<v1::LinkState> slow_links;
  // Failures attributed to the same node in a row, and the nodes excluded for it.
  std::string last_failed_node;
  int failure_streak = 0;
  std::set<std::string> excluded;
  // The newest checkpoint step any generation reported, and when it was first reported: a new
  // generation's ranks report the checkpoint they resumed from, which is not a new one.
  int64_t newest_checkpoint_step = -1;
  absl::Time last_checkpoint_time = absl::InfinitePast();
  // Checkpoints that could not be saved since the newest committed checkpoint (across
  // generations), and the latest one's step, generation, error and its error's kind (digits
  // elided: the event is repeated when the kind changes).
  int64_t checkpoint_failures = 0;
  int64_t last_failed_checkpoint = 0;
  int64_t last_failed_generation = 0;
  std::string last_checkpoint_error;
  std::string last_checkpoint_error_kind;
  // Crash-loop backoff and drain waits (whether the current generation stepped, and the failures
  // in a row of generations that did not, are in the status): when the next launch may happen.
  absl::Time launch_not_before = absl::InfinitePast();
  // The settling nodes the last "elastic" event said a grow waits for (NoteGrowSettling).
  std::set<std::string> grow_waits_for;
  // MASTER_PORT given to the latest generation this coordinator launched; 0: none (or launched
  // before it restarted). Other jobs' launches avoid it while this job runs or restarts.
  int master_port = 0;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_MANAGER_INTERNAL_H_
