// Real child processes for integration tests: start a program (no shell) in its own process
// group, with its stdout and stderr going to a file, signal it, and wait for it with a deadline.
#ifndef RINGMASTER_COMMON_TESTING_SUBPROCESS_H_
#define RINGMASTER_COMMON_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ringmaster::testing {

// A running child. Not thread-safe. The destructor SIGKILLs the process group if still running.
class Subprocess {
 public:
  // Starts argv (argv[0] is looked up in PATH) with stdout+stderr appended to `log_path`.
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv,
                                          const std::string& log_path);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // True until the child has been reaped (checks without blocking).
  bool Running();
  // Sends `signal` to the child's whole process group.
  void Signal(int signal);
  // Waits up to `timeout` for the child to exit; returns its raw wait status, or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL and reap. Returns the wait status.
  int Stop(absl::Duration grace = absl::Seconds(5));
  // Contents of the log file so far (for failure messages).
  std::string Log() const;

 private:
  Subprocess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_ = -1;
  int wait_status_ = 0;
  bool reaped_ = false;
  std::string log_path_;
};

struct CommandResult {
  int exit_code = -1;  // -1 if killed by a signal.
  std::string output;  // stdout and stderr together.
};

// Runs argv to completion feeding `stdin_data`, and returns its exit code and output.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::string& stdin_data);

// A directory for the test's files: $TEST_TMPDIR (Bazel) or a fresh mkdtemp directory.
std::string TestTempDir();

// An empty directory for the running test case (googletest's): TestTempDir()/PREFIX<test name>,
// whatever an earlier run left there removed.
std::string FreshTestCaseDir(const std::string& prefix = "");

// A TCP port on 127.0.0.1 that was free a moment ago, for servers (like Prometheus) that cannot
// report the port they bound to. Callers must retry on a bind failure.
absl::StatusOr<int> PickUnusedPort();

}  // namespace ringmaster::testing

#endif  // RINGMASTER_COMMON_TESTING_SUBPROCESS_H_
