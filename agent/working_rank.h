// Whether a watched rank works outside any collective now, from its Python watch's collectives
// reports (about one a second): the report says whether the rank is blocked in a collective
// (blocked_known) and how much CPU its training thread has used (thread_cpu_seconds).
//
// Working: the latest report, at most kStale old, says the rank is outside any collective (not
// blocked, no collective entered and not completed), and its training thread used at least
// kMinCpuShare of the wall time between the oldest and the newest report of the last kWindow
// (at least kMinSpan apart). That is rank 0 evaluating, logging or preparing data alone while
// its peers wait for it in the next collective: its thread runs. A rank stuck outside any
// collective (a data loader waiting on a dead worker, a lock that is never released, a dead
// filesystem, a sleep) uses no CPU and is not working; nor is one that reports no CPU (the
// builtin trainer, an older watch: 0), nor one whose CPU count went back (a new process under
// a shell: the window starts over). What it cannot tell from work: a thread that spins while it
// is stuck (a loop that never ends; a GPU kernel that never ends, waited for by a spinning
// synchronisation).
//
// Also what a collectives report says: WaitsOnPeers (blocked or a collective outstanding) and
// StackOnly (only a stalled process's stack). Those are pure functions.
//
// Pure logic over the times the caller passes (the agent's clock when each report came).
// Thread-compatible; no errors.
#ifndef RINGMASTER_AGENT_WORKING_RANK_H_
#define RINGMASTER_AGENT_WORKING_RANK_H_

#include <deque>
#include <utility>

#include "absl/time/time.h"
#include "proto/ringmaster/v1/worker.pb.h"

namespace ringmaster::agent {

// Whether a (valid) collectives report says the rank waits on its peers: blocked in a call, or a
// collective entered and not completed (an async work not done; on NCCL, one the GPU has not
// finished while the host went on). A group with no completed number has completed none.
bool WaitsOnPeers(const v1::ReportCollectivesRequest& report);

// Whether a collectives report carries only a stalled process's stack: no sequence numbers,
// nothing said of a wait (not blocked_known), not the watch's last word. The Python watch sends
// such before init_process_group (worker.proto's `stack`), as may a second Python process of the
// rank beside the one that has the groups (an uploader that imported torch). It says nothing of
// progress, waits or work: the watchdog and WorkingRank take no notice of it, and its stack
// stands for the rank only while no process of it has reported numbers (rank_metrics.h).
bool StackOnly(const v1::ReportCollectivesRequest& report);

class WorkingRank {
 public:
  // Long enough that a pause of a few seconds in the work (an evaluation's data loader starting
  // its workers) is still work; short enough that a rank stuck after working hard reads as not
  // working (under a tenth of the window's CPU) about 5.4 s on, before its peers' step
  // allowance (9 s at least, agent/local_watchdog.h) names it.
  static constexpr absl::Duration kWindow = absl::Seconds(6);
  static constexpr absl::Duration kMinSpan = absl::Milliseconds(1500);
  static constexpr absl::Duration kStale = absl::Seconds(3);
  static constexpr double kMinCpuShare = 0.1;

  // A collectives report (validated) heard at `now`, which does not go back.
  void Heard(absl::Time now, const v1::ReportCollectivesRequest& report);
  // Forgets every report (a new generation, or a watch that ended).
  void Reset();
  // Whether the rank works outside any collective at `now` (the class comment).
  bool Working(absl::Time now) const;

 private:
  bool outside_ = false;  // the latest report says the rank is outside any collective
  // (heard, thread CPU seconds) of the reports of the last kWindow, oldest first; the newest is
  // the latest report's, when it said the CPU.
  std::deque<std::pair<absl::Time, double>> cpu_;
  absl::Time latest_ = absl::InfinitePast();
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_WORKING_RANK_H_
