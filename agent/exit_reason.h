// What an agent says of why a worker ended (WorkerState.exit_reason), from how it ended and what
// the worker announced before (the worker API's ReportExit). Pure logic: thread-compatible, no
// state, no errors.
#ifndef RINGMASTER_AGENT_EXIT_REASON_H_
#define RINGMASTER_AGENT_EXIT_REASON_H_

#include <optional>
#include <string>

#include "agent/worker_launcher.h"
#include "common/one_line.h"

namespace ringmaster::agent {

// A worker's word on its coming exit.
struct ExitAnnouncement {
  int exit_code = 0;
  std::string reason;
};

// For an exit with code 0: "", unless the agent stopped the worker. Otherwise, made one line of
// at most kExitReasonBytes (common/one_line.h):
// - announced, and it exited with the code it announced: the announced reason;
// - announced, and it ended otherwise (another code, a signal: it failed or was killed while
//   exiting): "after announcing exit C: " and the reason, the root cause;
// - not announced (or with an empty reason): "last output: " and its last line
//   (ExitInfo::last_line), "last output before the stop: " for a worker the agent stopped (its
//   line from before the first signal), or "" if it printed nothing.
// - `oom` (OomKillWatch::RecentKills, for a failure the agent did not cause), if not empty,
//   goes first: "likely out of memory (...)" and ": " and the rest, if any.
std::string ExitReason(const ExitInfo& info, const std::optional<ExitAnnouncement>& announced,
                       const std::string& oom = "");

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_EXIT_REASON_H_
