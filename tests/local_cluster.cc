#include "tests/local_cluster.h"

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

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

CommandResult CtlAt(const std::string& address, std::vector<std::string> args) {
  std::vector<std::string> full = {"--insecure", "--coordinator=" + address};
  full.insert(full.end(), args.begin(), args.end());
  auto r = RunRingctl(full);
  return r.ok() ? *r : CommandResult{-1, r.status().ToString()};
}

std::string SubmitJobFile(const std::string& address, const std::string& dir,
                          const std::string& name, const std::string& yaml) {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << yaml;
  CommandResult r = CtlAt(address, {"submit", "-f", path});
  std::smatch m;
  if (r.exit_code != 0 || !std::regex_search(r.output, m, std::regex("job (\\S+) submitted"))) {
    std::fprintf(stderr, "submitting %s failed (exit %d): %s\n", path.c_str(), r.exit_code,
                 r.output.c_str());
    return "";
  }
  return m[1].str();
}

std::string WaitForJobEnd(const std::string& address, const std::string& job,
                          absl::Duration timeout) {
  std::string state;
  WaitFor(
      [&] {
        const std::string out = CtlAt(address, {"get", "job", job}).output;
        for (const char* s : {"SUCCEEDED", "FAILED", "CANCELLED"}) {
          if (out.find(s) != std::string::npos) state = s;
        }
        return !state.empty();
      },
      timeout);
  return state;
}

std::string RankLogIn(const std::vector<std::string>& work_dirs, const std::string& job,
                      int generation, int rank) {
  for (const std::string& work : work_dirs) {
    std::ifstream in(absl::StrCat(work, "/logs/", job, "/", generation, "/rank-", rank, ".log"));
    std::stringstream log;
    log << in.rdbuf();
    if (!log.str().empty()) return log.str();
  }
  return "";
}

}  // namespace ringmaster::testing
