// The seam between the agent and the worker processes it runs: launch a worker from a
// LaunchSpec, stop it, list the running ones, and hear of each exit through a callback.
// WorkerSupervisor (worker_supervisor.h) is the real one (fork/exec, process groups, a reaper
// thread); tests inject a fake that records launches and stops without starting processes.
//
// Threading: implementations are thread-safe. The exit callback runs once per launched worker,
// never with a launcher lock held and never from inside Launch() (the agent launches under its
// own lock, which the callback takes); it must not call Stop().
// Ownership: the agent owns its launcher (made through a WorkerLauncherFactory, handed the
// agent's exit callback) and destroys it after the agent's threads have ended.
// Errors: as WorkerSupervisor's Launch() and Stop() state them (UNAVAILABLE: retryable; NOT_FOUND
// from Stop(): no such worker, or already gone).
#ifndef RINGMASTER_AGENT_WORKER_LAUNCHER_H_
#define RINGMASTER_AGENT_WORKER_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace ringmaster::agent {

struct LaunchSpec {
  // argv[0] is resolved through the agent's PATH (execvp). Must not be empty.
  std::vector<std::string> argv;
  // The complete environment of the worker (nothing is inherited from the agent).
  std::map<std::string, std::string> env;
  // Working directory; empty = the agent's.
  std::string cwd;
  // stdout and stderr go here, interleaved as written (appended to an existing file). When the
  // file would grow past max_log_bytes it is rotated: the current file becomes
  // `log_path + ".1"` (replacing an older one) and a new file starts, so at most
  // 2 * max_log_bytes are kept per worker.
  std::string log_path;
  int64_t max_log_bytes = 64 << 20;
  // Written to the worker's /proc/self/oom_score_adj before exec (oom_score.h); unset: the
  // agent's own, inherited. A value the worker may not set is reported in its log and skipped.
  std::optional<int> oom_score_adj;
};

struct ExitInfo {
  int exit_code = -1;  // -1 when killed by a signal.
  int signal = 0;      // 0 when it exited normally.
  // The last line the worker printed that was not blank (OutputTail::LastLine: one line, at most
  // 512 bytes, valid UTF-8), or "". For a worker that ended by itself, as of the exit's report:
  // everything it wrote when it left no process behind. For a stopped one, the last line before
  // Stop() signalled it (what it was doing, not how it reacted to the stop).
  std::string last_line;
  // A Stop() had begun (taken its last line) before the process ended: the agent ended it, or
  // it ended on its own meanwhile.
  bool stopped = false;
};

class WorkerLauncher {
 public:
  // Called once per launched worker when it has exited.
  using ExitCallback = std::function<void(pid_t pid, ExitInfo info)>;

  // Stops every worker still running (grace 0).
  virtual ~WorkerLauncher() = default;

  // Starts a worker; its pid (the id Stop() and the exit callback use).
  virtual absl::StatusOr<pid_t> Launch(const LaunchSpec& spec) = 0;

  // Stops the worker `pid` (SIGUSR1 and `checkpoint_grace` first when that is not zero, then
  // SIGTERM and `grace`, then SIGKILL) and returns once it is gone and its exit was reported.
  // NOT_FOUND if `pid` is no worker of this launcher (or one already gone).
  virtual absl::Status Stop(pid_t pid, absl::Duration grace,
                            absl::Duration checkpoint_grace = absl::ZeroDuration()) = 0;

  // Pids of the workers still running.
  virtual std::vector<pid_t> Running() const = 0;

  // Standbys: processes started ahead of a launch (a hot spare's pre-start, docs/agent.md) that
  // wait for their assignment on descriptor kStandbyFd. A standby is no worker: Running() does
  // not list it, Stop() does not know it, and its exit is never reported through the callback.
  // The default implementations have none (UNIMPLEMENTED, NOT_FOUND): the agent then launches
  // normally.
  //
  // Starts a standby of `spec` (argv, env, cwd, oom_score_adj; its log_path is not used): the
  // process starts with descriptor kStandbyFd open for reading, which yields its assignment (the
  // complete environment, each "NAME=VALUE" followed by a NUL byte) and then end of file. Errors
  // as Launch().
  virtual absl::StatusOr<pid_t> StartStandby(const LaunchSpec& spec);
  // Makes the standby `pid` the worker of `spec` (its env sent as the assignment, its output
  // from now on, and what it wrote before, into spec.log_path): afterwards it is a worker like one
  // Launch() started, with the same pid. `spec.argv` must equal the standby's (the agent checks).
  // NOT_FOUND if `pid` is no live standby; UNAVAILABLE if it could not take its assignment (it
  // is then killed, as a standby: no exit reported). Either way the caller may Launch() instead.
  virtual absl::Status ActivateStandby(pid_t pid, const LaunchSpec& spec);
  // Kills the standby `pid` (SIGKILL to its group) and returns once it is reaped. NOT_FOUND if
  // it is no standby (already gone, or activated).
  virtual absl::Status StopStandby(pid_t pid);
  // Pids of the standbys still alive.
  virtual std::vector<pid_t> Standbys() const;
};

// The descriptor a standby reads its assignment from.
inline constexpr int kStandbyFd = 3;

inline absl::StatusOr<pid_t> WorkerLauncher::StartStandby(const LaunchSpec&) {
  return absl::UnimplementedError("this launcher starts no standby");
}
inline absl::Status WorkerLauncher::ActivateStandby(pid_t pid, const LaunchSpec&) {
  return absl::NotFoundError(absl::StrCat("no standby with pid ", pid));
}
inline absl::Status WorkerLauncher::StopStandby(pid_t pid) {
  return absl::NotFoundError(absl::StrCat("no standby with pid ", pid));
}
inline std::vector<pid_t> WorkerLauncher::Standbys() const { return {}; }

// Makes the agent's launcher, handing it the callback for exits. Called once, by the agent's
// constructor.
using WorkerLauncherFactory =
    std::function<std::unique_ptr<WorkerLauncher>(WorkerLauncher::ExitCallback on_exit)>;

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_WORKER_LAUNCHER_H_
