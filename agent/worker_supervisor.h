// Launching and supervising worker processes on a node: the real WorkerLauncher
// (worker_launcher.h, where LaunchSpec and ExitInfo are defined).
//
// Threading: thread-safe. The exit callback runs on the reaper thread, never with a supervisor
// lock held; it must not block for long, and must not call Stop() (Stop waits for the reaper).
// Ownership: at most one per process (see the reaper below); its owner (the agent) destroys it
// after every caller is done. Errors: absl::Status, each method saying which codes mean what.
//
// Each worker is fork/exec'ed directly (no shell) in a process group of its own, with exactly the
// environment given, its stdout and stderr captured into a size-bounded log file. The supervisor
// makes the agent a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so descendants a worker
// leaves behind are re-parented to the agent and reaped: no zombie, no orphan.
//
// A worker starts with stdin on /dev/null, no descriptor besides 0, 1 and 2 (every descriptor the
// supervisor opens is close-on-exec, and the child closes the rest before exec), no signal
// blocked and every signal at its default action but the two the C library reserves (the agent
// blocks SIGTERM and gRPC ignores SIGPIPE; a worker inherits neither).
//
// Exits are reported through the callback as soon as they are reaped (a dedicated reaper thread
// waits on children), with the exit code or the terminating signal and the last line the worker
// printed. When the worker left no process behind in its group, its log holds everything it wrote
// by the time the exit is reported.
//
// The reaper waits for every child of the process (waitpid(-1)), re-parented descendants
// included. So a process may hold one WorkerSupervisor at a time, and no other code in it may
// fork children and wait for them itself: the reaper would take their exit statuses.
//
// Stop(): SIGTERM + SIGCONT to the worker's process group (SIGCONT so a SIGSTOPped worker acts on
// the SIGTERM, pending as it resumes), then after `grace` SIGKILL to the group. With a `checkpoint_grace`, SIGUSR1 (a
// request to checkpoint and exit) goes to the group first and the SIGTERM only once that much time
// has passed with processes left; it returns once the group has no process
// left (a group whose leader exited but whose children linger is killed too). A worker that
// ignores SIGTERM, is stopped, or forked children is therefore removed completely. A descendant
// that leaves the group (setsid, setpgid) escapes Stop(); it is still reaped when it exits, but
// its output after the worker's group is gone is dropped. The exit of a worker Stop() ends says
// so (ExitInfo::stopped), with the last line it printed before the first signal.
#ifndef RINGMASTER_AGENT_WORKER_SUPERVISOR_H_
#define RINGMASTER_AGENT_WORKER_SUPERVISOR_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/worker_launcher.h"
#include "common/unique_fd.h"

namespace ringmaster::agent {

class WorkerSupervisor : public WorkerLauncher {
 public:
  // Called once per launched worker when its process (the group leader) is reaped.
  using ExitCallback = WorkerLauncher::ExitCallback;

  // Starts the reaper thread and makes this process a child subreaper.
  explicit WorkerSupervisor(ExitCallback on_exit);
  // Stops every worker (grace 0) and joins the threads.
  ~WorkerSupervisor() override;

  // Starts a worker. INVALID_ARGUMENT for an empty argv or log_path or a max_log_bytes below 1;
  // the open(2) error (e.g. NOT_FOUND, PERMISSION_DENIED) if the log file cannot be opened;
  // UNAVAILABLE if fork fails; if exec or chdir fails (e.g. no such program) the worker exits
  // 127 with the reason in its log and the exit is reported like any other.
  absl::StatusOr<pid_t> Launch(const LaunchSpec& spec) override;

  // Stops the worker whose process group is `pid` as described above, and returns when the group
  // is empty and the worker's exit has been reported. NOT_FOUND if `pid` is not a worker this
  // supervisor launched (or already stopped, or already gone with its whole group).
  // DEADLINE_EXCEEDED if processes of the group outlive SIGKILL by 30 seconds (uninterruptible
  // sleep in a driver); the worker then stays listed and Stop() may be called again. A second
  // Stop() of a worker being stopped brings the first one's SIGTERM and SIGKILL forward to when
  // its own graces would send them, if sooner (never later: an agent leaving during a drain
  // keeps to its own shorter graces, not the drain's), waits for the first and then answers as
  // if called after it: NOT_FOUND once the first removed the worker, or OK when it finds the
  // group empty but the exit not yet reported and finishes the stop itself.
  absl::Status Stop(pid_t pid, absl::Duration grace,
                    absl::Duration checkpoint_grace = absl::ZeroDuration()) override;

  // Pids of workers whose process group still has processes.
  std::vector<pid_t> Running() const override;

  // Standbys (worker_launcher.h): started like a worker, with its output held in its pipe until
  // activation and its assignment pipe as descriptor kStandbyFd. ActivateStandby gives it at most
  // 2 seconds to read its assignment. The destructor kills the standbys left (SIGKILL); so does
  // the agent's death (PR_SET_PDEATHSIG, as for workers), and a standby whose agent is gone
  // reads end of file on kStandbyFd.
  absl::StatusOr<pid_t> StartStandby(const LaunchSpec& spec) override;
  absl::Status ActivateStandby(pid_t pid, const LaunchSpec& spec) override;
  absl::Status StopStandby(pid_t pid) override;
  std::vector<pid_t> Standbys() const override;

 private:
  struct Worker;
  class LogPump;
  // A started standby until it is activated or reaped.
  struct Standby {
    UniqueFd output;   // read end of its stdout/stderr pipe, pumped once activated
    UniqueFd control;  // write end of its assignment pipe (its kStandbyFd)
  };

  void ReapLoop();
  // Records the reaping of `pid` (any child), finishes the logs of workers now gone completely,
  // and reports the exit if `pid` was a worker.
  void OnReaped(pid_t pid, int wait_status);
  // Removes the workers whose leader was reaped and whose group is empty (skipping those a Stop()
  // is working on) and returns their log pumps, to be finished without the lock.
  std::vector<std::unique_ptr<LogPump>> TakeGoneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until the group `pgid` is empty or `*deadline` (read under mu_, so another Stop() may
  // bring it forward) passes; returns whether it is empty. Wakes on every reap and every
  // deadline brought forward, and polls in between (nothing signals that a group became empty).
  bool WaitGroupEmpty(pid_t pgid, const absl::Time* deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // True while any process is in `pgid`.
  static bool GroupAlive(pid_t pgid);

  const ExitCallback on_exit_;
  mutable absl::Mutex mu_;
  // Launched workers until their group is gone; the fields of Worker are guarded by mu_ too.
  std::map<pid_t, std::shared_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  // Standbys started and neither activated nor reaped yet.
  std::map<pid_t, Standby> standbys_ ABSL_GUARDED_BY(mu_);
  // Counts forks, so a reaper that found no child to wait for sleeps until the next launch.
  uint64_t launches_ ABSL_GUARDED_BY(mu_) = 0;
  // Counts reaped processes, so Stop() re-checks a group as soon as one of its processes is gone.
  uint64_t reaps_ ABSL_GUARDED_BY(mu_) = 0;
  // Counts deadlines brought forward, so the Stop() at work re-reads its own at once.
  uint64_t hurries_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The reaper blocks in waitpid(-1) while the process has children. To wake it for shutdown
  // without a SIGCHLD handler or signalfd (either would need the signal blocked or handled in
  // every thread of a multi-threaded process), the destructor forks a child that exits at once.
  pid_t wake_child_ ABSL_GUARDED_BY(mu_) = -1;
  std::thread reaper_;
};

// A WorkerLauncherFactory that makes a WorkerSupervisor (the agent's real launcher).
WorkerLauncherFactory WorkerSupervisorFactory();

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_WORKER_SUPERVISOR_H_
