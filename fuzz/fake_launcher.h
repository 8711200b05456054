// A WorkerLauncher (agent/worker_launcher.h) for the fuzz targets: records what the agent would
// start and never starts a process, so no fuzzed argv or environment ever reaches exec.
//
// Threading: thread-safe. The exit callback runs from Stop() (after the launcher's lock is
// released), as the real launcher reports a stopped worker's exit before Stop() returns.
// Ownership: the agent owns it; it keeps copies of the launch specs.
// Errors: Stop() of a pid it does not run is NOT_FOUND, as the real one's.
#ifndef RINGMASTER_FUZZ_FAKE_LAUNCHER_H_
#define RINGMASTER_FUZZ_FAKE_LAUNCHER_H_

#include <csignal>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "agent/worker_launcher.h"

namespace ringmaster::fuzz {

class FakeLauncher : public agent::WorkerLauncher {
 public:
  explicit FakeLauncher(ExitCallback on_exit) : on_exit_(std::move(on_exit)) {}

  // A factory for NodeAgent that stores the launcher it makes in *made (which must outlive it).
  static agent::WorkerLauncherFactory Factory(FakeLauncher** made) {
    return [made](ExitCallback on_exit) -> std::unique_ptr<agent::WorkerLauncher> {
      auto launcher = std::make_unique<FakeLauncher>(std::move(on_exit));
      *made = launcher.get();
      return launcher;
    };
  }

  absl::StatusOr<pid_t> Launch(const agent::LaunchSpec& spec) override {
    absl::MutexLock lock(&mu_);
    const pid_t pid = next_pid_++;
    running_[pid] = spec;
    return pid;
  }

  absl::Status Stop(pid_t pid, absl::Duration, absl::Duration) override {
    {
      absl::MutexLock lock(&mu_);
      if (running_.erase(pid) == 0) return absl::NotFoundError("no such worker");
    }
    on_exit_(pid, agent::ExitInfo{-1, SIGTERM, "", /*stopped=*/true});
    return absl::OkStatus();
  }

  std::vector<pid_t> Running() const override {
    absl::MutexLock lock(&mu_);
    std::vector<pid_t> pids;
    for (const auto& [pid, spec] : running_) pids.push_back(pid);
    return pids;
  }

  // The specs of the workers running, by pid.
  std::map<pid_t, agent::LaunchSpec> Specs() const {
    absl::MutexLock lock(&mu_);
    return running_;
  }

 private:
  const ExitCallback on_exit_;
  mutable absl::Mutex mu_;
  pid_t next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
  std::map<pid_t, agent::LaunchSpec> running_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::fuzz

#endif  // RINGMASTER_FUZZ_FAKE_LAUNCHER_H_
