// One job's recoveries and goodput, from the coordinator's decisions and the workers' startup
// figures. Pure logic over times passed in.
//
// A recovery runs from a failure to the first step every rank of the next generation completed:
//   detect      failure -> the coordinator's decision (worker exit: when the agent reaped it; hang:
//               when the rank last made progress; lost node: its last heartbeat)
//   place       decision -> LaunchWorkers sent (placement, persistence)
//   stop        launch -> the last new worker process started (the agents stop the old
//               generation, confirmed gone, before they start the new one)
//   rendezvous  process start -> communicators connected (slowest rank)
//   link_check  the link check (slowest rank; 0 when the job has it off)
//   restore     checkpoint load (slowest rank)
//   first_step  the first step (slowest rank)
//   total       failure -> the slowest rank's first step done
// Worker times are their wall clocks; across machines clock skew enters stop and total.
//
// Goodput: the share of wall time since the job first ran that produced steps the job kept:
// time between consecutive step completions of the reference rank counts; work after the newest
// checkpoint that a restart throws away is taken back.
//
// Not thread-safe (the job manager's lock guards it).
#ifndef RINGMASTER_COORDINATOR_RECOVERY_TRACKER_H_
#define RINGMASTER_COORDINATOR_RECOVERY_TRACKER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/time/time.h"

namespace ringmaster::coordinator {

struct RecoveryPhases {
  double detect = 0, place = 0, stop = 0, rendezvous = 0, link_check = 0, restore = 0,
         first_step = 0, total = 0;
  std::string ToString() const;
};

// What a worker process reports about its start (StepSummary's startup fields).
struct WorkerStartup {
  absl::Time process_start;
  double rendezvous_seconds = 0;
  double restore_seconds = 0;
  double first_step_seconds = 0;
  double link_check_seconds = 0;  // from the rank's link report (not its step summary)
};

class RecoveryTracker {
 public:
  // A failure that happened at `failed_at` was acted on at `decided_at`. A later failure before
  // the recovery completes restarts the timeline.
  void OnFailure(absl::Time failed_at, absl::Time decided_at);
  // A generation of `world` ranks was launched.
  void OnLaunch(int world, absl::Time at);
  // The startup figures of `rank` in the current generation (once per rank; repeats ignored).
  // Returns the recovery's phases when this completes one.
  std::optional<RecoveryPhases> OnWorkerStarted(int rank, const WorkerStartup& startup);

  // The reference rank completed `step` at `end` (its summaries, in order). `first_step_seconds`
  // is the duration of the process's first step, used for the first report of a generation.
  void OnStep(int64_t step, absl::Time end, double first_step_seconds);
  // The current generation resumed from `start_step` (the checkpoint's step, or 0).
  void OnResume(int64_t start_step);
  // A checkpoint of `step` committed. The per-step history OnResume needs is kept back to the
  // third newest checkpoint (a resume goes to the newest intact one), so it stays bounded however
  // long the job runs; a resume from further back is estimated pro rata of the oldest step kept.
  void OnCheckpoint(int64_t step);
  // Steps in that history (for tests).
  size_t HistorySize() const { return productive_at_step_.size(); }
  // Kept step time over wall time since the first launch, in [0, 1]; 0 before the first launch.
  double Goodput(absl::Time now) const;

 private:
  // Recovery in progress.
  std::optional<absl::Time> failed_at_, decided_at_, launched_at_;
  int world_ = 0;
  std::map<int, WorkerStartup> started_;
  // Goodput.
  std::optional<absl::Time> first_launch_;
  double productive_seconds_ = 0;
  int64_t last_step_ = 0;
  std::optional<absl::Time> last_end_;
  std::map<int64_t, double> productive_at_step_;
  std::deque<int64_t> checkpoints_;  // the newest few, ascending
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_RECOVERY_TRACKER_H_
