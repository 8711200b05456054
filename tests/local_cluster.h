// Starting real Ringmaster processes for integration tests and reading back the ports they chose.
// Binaries are found in the test's runfiles (declare them in `data`).
#ifndef RINGMASTER_TESTS_LOCAL_CLUSTER_H_
#define RINGMASTER_TESTS_LOCAL_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/subprocess.h"

namespace ringmaster::testing {

struct CoordinatorProcess {
  Subprocess process;
  int grpc_port = 0;
  int metrics_port = 0;
  std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port); }
};

// Starts coordinator/coordinator on 127.0.0.1 port 0 (gRPC and metrics) with `extra_flags`, and
// waits until it logs both ports. FAILED_PRECONDITION with its log if it exits first.
absl::StatusOr<CoordinatorProcess> StartCoordinator(const std::vector<std::string>& extra_flags);

// Runs ctl/ringctl with `args` and returns its exit code and output.
absl::StatusOr<CommandResult> RunRingctl(const std::vector<std::string>& args);

// What TestCluster and NetnsCluster share, for the plaintext coordinator at `address`:
// ringctl with `args` (a ringctl that cannot run reads as exit -1 with the error as output);
CommandResult CtlAt(const std::string& address, std::vector<std::string> args);
// `yaml` written to DIR/NAME.yaml and submitted: the job id, or "" (said on stderr);
std::string SubmitJobFile(const std::string& address, const std::string& dir,
                          const std::string& name, const std::string& yaml);
// the job's final state (SUCCEEDED, FAILED, CANCELLED), or "" when `timeout` passed first;
std::string WaitForJobEnd(const std::string& address, const std::string& job,
                          absl::Duration timeout);
// rank `rank`'s log of `generation` from the first agent work directory holding it, or "".
std::string RankLogIn(const std::vector<std::string>& work_dirs, const std::string& job,
                      int generation, int rank);

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_LOCAL_CLUSTER_H_
