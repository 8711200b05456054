// The kernel OOM killer's bias for the agent and its workers (/proc/PID/oom_score_adj, -1000 to
// 1000: the higher, the likelier a process is chosen). A worker dies with its agent (it is set
// to get SIGKILL when the agent goes), so an OOM kill of the agent would take every worker on the
// node with it, and the node out of scheduling until it is restarted. The agent therefore lowers
// its own value at start (--oom_score_adj) and gives its workers back the value it started with.
#ifndef RINGMASTER_AGENT_OOM_SCORE_H_
#define RINGMASTER_AGENT_OOM_SCORE_H_

#include <sys/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringmaster::agent {

constexpr int kMinOomScoreAdj = -1000;
constexpr int kMaxOomScoreAdj = 1000;

// OK for a value in [-1000, 1000]; else INVALID_ARGUMENT "oom_score_adj must be in ...".
absl::Status CheckOomScoreAdj(int value);

// The oom_score_adj of process `pid` (0: this process).
absl::StatusOr<int> ReadOomScoreAdj(pid_t pid = 0);

// Sets this process's oom_score_adj. Lowering it below the value last set with CAP_SYS_RESOURCE
// (0 for a process no privileged one ever set) needs that capability (PERMISSION_DENIED without
// it); raising it does not. INVALID_ARGUMENT outside [-1000, 1000].
absl::Status SetOomScoreAdj(int value);

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_OOM_SCORE_H_
