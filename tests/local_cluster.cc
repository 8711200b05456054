#include "tests/local_cluster.h"

#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/wait.h"

namespace ringmaster::testing {

absl::StatusOr<CoordinatorProcess> StartCoordinator(const std::vector<std::string>& extra_flags) {
  static int instance = 0;
  std::vector<std::string> argv = {"coordinator/coordinator", "--listen=127.0.0.1:0",
                                   "--metrics_listen=127.0.0.1:0"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  auto process =
      Subprocess::Start(argv, absl::StrCat(TestTempDir(), "/coordinator", instance++, ".log"));
  if (!process.ok()) return process.status();
  const std::regex grpc_re("coordinator gRPC listening on [^ ]+:(\\d+)");
  const std::regex metrics_re("coordinator metrics listening on [^ ]+:(\\d+)");
  std::smatch grpc_match, metrics_match;
  std::string log;
  WaitFor(
      [&] {
        log = process->Log();
        return !process->Running() || (std::regex_search(log, grpc_match, grpc_re) &&
                                       std::regex_search(log, metrics_match, metrics_re));
      },
      absl::Seconds(30));
  if (!process->Running()) {
    return absl::FailedPreconditionError(absl::StrCat("coordinator exited:\n", log));
  }
  CoordinatorProcess result{std::move(*process)};
  if (grpc_match.empty() || metrics_match.empty() ||
      !absl::SimpleAtoi(grpc_match[1].str(), &result.grpc_port) ||
      !absl::SimpleAtoi(metrics_match[1].str(), &result.metrics_port)) {
    return absl::DeadlineExceededError(absl::StrCat("coordinator never logged its ports:\n", log));
  }
  return result;
}

absl::StatusOr<CommandResult> RunRingctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ctl/ringctl"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, "");
}

}  // namespace ringmaster::testing
