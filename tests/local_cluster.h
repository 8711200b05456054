// Starting real Ringmaster processes for integration tests and reading back the ports they chose.
// Binaries are found in the test's runfiles (declare them in `data`).
#ifndef RINGMASTER_TESTS_LOCAL_CLUSTER_H_
#define RINGMASTER_TESTS_LOCAL_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
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

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_LOCAL_CLUSTER_H_
