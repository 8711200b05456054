// The agent's local watchdog: a worker whose reports stop for longer than its current phase's
// allowance is hung. Pure logic over an injected clock; the agent calls Check() periodically and
// reports what it returns to the coordinator.
//
// Allowances per phase (the agent's flags set them; defaults below): STARTING and INIT get
// `init_timeout`, CHECKPOINT gets `checkpoint_timeout`, STEP and EVAL get
// max(step_floor, step_factor * p99 of the rank's recent step times) — a slow checkpoint is not a
// hang, and a job whose steps take minutes is not declared hung after seconds. Until the rank
// has reported a step, STEP gets `init_timeout` too (a process's first step includes warm-up).
//
// A job's spec may set its own STEP (watchdog.hang_timeout), INIT (watchdog.init_timeout) and
// CHECKPOINT (watchdog.checkpoint_timeout) allowances; those it leaves at 0 are the agent's.
//
// A command job's program need not use the worker API at all (an unmodified torchrun-style
// script never does), so its silence says nothing: such a rank is watched only from its first
// step or phase report on. The builtin trainer always reports, so its ranks are watched from
// launch (a trainer stuck before its first report is a hang too).
//
// Before that first report, a command rank that reports its collectives (the Python watch does,
// every second once torch.distributed is initialised; before that, only a stalled rank's stack,
// which this watchdog ignores: working_rank.h's StackOnly) is hung when it is blocked in a
// collective (ReportCollectivesRequest.blocked) and none of its sequence numbers moved for its
// wait allowance: the job's watchdog.init_timeout if it sets one; else, where the report says the
// process group's own timeout (timeout_seconds), just before torch would give up by itself
// (that timeout less 5%, at least 30 s, at most half), so a wait the program allows (rank 0
// preparing the data behind a barrier) is not cut short and the event, not torch's timeout
// error, says who held it up; else the agent's INIT allowance. A peer is stuck before the first
// step (a data loader that never returns), which the coordinator names from the sequence
// numbers. A rank that is not blocked in a collective cannot be hung this way: a program that
// computes for hours between collectives is not flagged; one that never steps is judged by this
// rule all its life. A rank that reported a phase before its first step (a save) is judged by
// its silence instead, with the INIT allowance.
//
// After its first step, a rank whose collectives reports say whether it is blocked
// (ReportCollectivesRequest.blocked_known: the Python watch, about every second) is judged by more
// than its silence: sequence numbers that moved are progress (an evaluation that gathers its
// metrics batch by batch), and in STEP or EVAL a rank whose last report (at most 5 s
// old) says it is outside any collective is busy outside its steps (an evaluation, a data pass,
// logging: a PyTorch program names no phase; not one with a collective entered and not completed
// either: an async work, or on NCCL one the GPU has not finished while the host went on), hung only
// past the busy allowance: the job's watchdog.hang_timeout if it sets one, else busy_timeout (10
// min). A stuck rank's peers wait blocked in the next collective and are hung at the STEP
// allowance, naming it; a rank blocked in a collective that does not move, or whose side thread
// fell silent too (a frozen process), gets the STEP allowance, counted from its last report that
// said it was busy. What the busy rule cannot tell from a wait: a one-rank job stuck outside any
// collective, every rank stuck outside one at once, a wait the watch does not see (a collective
// torch.compile traced, a store's wait): hung past the busy allowance. A report that says the
// watch ended (watch_ended: it disabled itself, or its program ended under a shell that may go on
// with other work) makes the rank unwatched again until its next step or phase report, and later
// collectives reports of that process are ignored.
//
// Thread-safe.
#ifndef RINGMASTER_AGENT_LOCAL_WATCHDOG_H_
#define RINGMASTER_AGENT_LOCAL_WATCHDOG_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/job.pb.h"
#include "proto/ringmaster/v1/worker.pb.h"

namespace ringmaster::agent {

struct WatchdogOptions {
  absl::Duration init_timeout = absl::Minutes(10);
  absl::Duration checkpoint_timeout = absl::Minutes(30);
  // A stepping rank busy outside any collective (the class comment).
  absl::Duration busy_timeout = absl::Minutes(10);
  // 9 s: with the agent's check and the report to the coordinator, a hang is acted on within
  // 10 s (the goal is max(10 s, 5 x p99 step)).
  absl::Duration step_floor = absl::Seconds(9);
  double step_factor = 5;
  int step_window = 100;  // Recent step times kept for the p99.
};

// A job's own allowances (spec.watchdog); zero: the agent's (WatchdogOptions).
struct JobAllowances {
  absl::Duration step;        // STEP and EVAL: hang_timeout_seconds; zero: from step times
  absl::Duration init;        // STARTING, INIT, and a collective wait before the first step
  absl::Duration checkpoint;  // CHECKPOINT
};

// The allowances `watchdog` sets (a negative or non-finite value, which validation refuses,
// counts as unset).
JobAllowances AllowancesOf(const v1::WatchdogSpec& watchdog);

struct HungRank {
  std::string job_id;
  int64_t generation = 0;
  int rank = 0;
  v1::WorkerPhase phase = v1::WORKER_PHASE_UNSPECIFIED;
  absl::Duration silent;     // How long since its last report (or its collectives last moved).
  absl::Duration allowance;  // What its phase allowed.
  // Before its first step or phase report: it waited inside a collective that did not move.
  bool in_collective = false;
};

class LocalWatchdog {
 public:
  LocalWatchdog(Clock* clock, WatchdogOptions options);

  // From when a tracked worker's silence counts.
  enum class WatchFrom {
    kLaunch,       // a program that reports (the builtin trainer)
    kFirstReport,  // a program that may never report (a command job's)
  };

  // A worker started (phase STARTING); replaces any previous state of (job, rank).
  // `allowances` are the job's own (a positive step allowance replaces
  // max(step_floor, step_factor * p99) as the STEP and EVAL allowance).
  void Track(const std::string& job_id, int64_t generation, int rank,
             JobAllowances allowances = {}, WatchFrom watch_from = WatchFrom::kLaunch);
  // Any report from the worker; `phase` is its current phase, `step_seconds` > 0 for a step report.
  // Ignored for an untracked rank or an older generation than the tracked one; a newer generation
  // replaces the state as Track() would. WORKER_PHASE_UNSPECIFIED keeps the current phase.
  void Report(const std::string& job_id, int64_t generation, int rank, v1::WorkerPhase phase,
              double step_seconds);
  // A collectives report (the caller checked its identity and form). A rank watched from its
  // first report that has not made one is judged by it, and after its first step one whose
  // reports say whether it is blocked (the class comment); ignored like Report() for an untracked
  // rank or an older generation.
  void Collectives(const v1::ReportCollectivesRequest& report);
  // The worker of `generation` is gone; a newer generation's tracking of the rank is kept (an
  // old worker's exit can be handled after its successor started).
  void Untrack(const std::string& job_id, int64_t generation, int rank);
  // Ranks silent beyond their allowance. Each hang is returned once until the rank reports again,
  // or until ReportHangsAgain().
  std::vector<HungRank> Check();
  // The next Check() returns the hangs already returned again: the agent calls it for every new
  // coordinator stream, since the coordinator that was told may have restarted before acting.
  void ReportHangsAgain();
  // The allowance the rank's current phase has now (for tests and metrics); InfiniteDuration() for
  // an untracked rank, one in WORKER_PHASE_EXITED, or one watched from its first report that has
  // not reported yet and is not blocked in a collective (none of them can hang).
  absl::Duration Allowance(const std::string& job_id, int rank) const;

 private:
  struct Worker {
    int64_t generation = 0;
    v1::WorkerPhase phase = v1::WORKER_PHASE_STARTING;
    absl::Time last_report;
    std::deque<double> step_seconds;  // The last options_.step_window step times, oldest first.
    bool hang_reported = false;       // Check() returned it since its last report.
    WatchFrom watch_from = WatchFrom::kLaunch;
    bool watched = true;              // false until the first report, for WatchFrom::kFirstReport
    JobAllowances allowances;         // the job's own; zero ones are options_'s
    // Before the first report of a WatchFrom::kFirstReport rank: blocked in a collective since
    // `stalled_since`, with the sequence numbers `sequences` (entered, completed) unchanged;
    // the process group's own timeout.
    bool in_collective = false;
    absl::Time stalled_since;
    std::map<std::string, std::pair<int64_t, int64_t>> sequences;
    absl::Duration program_timeout;
    // Once watched: its last collectives report that said whether it is blocked (blocked_known),
    // when it came and what it said; its numbers are `sequences`.
    bool tells_blocked = false;
    absl::Time collectives_heard;
    bool blocked_now = false;
    absl::Time busy_heard = absl::InfinitePast();  // its last report that made it busy
    bool ended = false;  // watch_ended, and no step or phase report since
  };
  using Key = std::pair<std::string, int>;  // (job_id, rank)

  // `worker` starts over as `generation`'s, at `now`, keeping its job's allowances and WatchFrom
  // (a newer generation's first report can come before its Track()).
  static void StartGeneration(Worker* worker, int64_t generation, absl::Time now);
  absl::Duration AllowanceOf(const Worker& worker, absl::Time now) const;
  // Watched, in STEP or EVAL, and its last collectives report, recent, says it is not blocked.
  static bool Busy(const Worker& worker, absl::Time now);
  absl::Duration InitAllowance(const Worker& worker) const;
  absl::Duration WaitAllowance(const Worker& worker) const;  // the blocked rule's
  absl::Duration CheckpointAllowance(const Worker& worker) const;

  Clock* const clock_;
  const WatchdogOptions options_;
  mutable absl::Mutex mu_;
  std::map<Key, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_LOCAL_WATCHDOG_H_
