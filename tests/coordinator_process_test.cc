// The coordinator and ringctl as real processes on loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace ringmaster::testing {
namespace {

TEST(CoordinatorProcessTest, RingctlHealthSeesItServingThenGone) {
  auto coordinator = StartCoordinator({"--insecure"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto health = RunRingctl({"--insecure", "--coordinator=" + coordinator->address(), "health"});
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->exit_code, 0) << health->output;
  EXPECT_NE(health->output.find("SERVING"), std::string::npos) << health->output;

  coordinator->process.Signal(SIGTERM);
  auto status = coordinator->process.Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << coordinator->process.Log();

  // Unreachable: one line, exit 1, no gRPC noise.
  health = RunRingctl(
      {"--insecure", "--timeout=2", "--coordinator=" + coordinator->address(), "health"});
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->exit_code, 1) << health->output;
  EXPECT_NE(health->output.find("unreachable"), std::string::npos) << health->output;
  EXPECT_EQ(std::count(health->output.begin(), health->output.end(), '\n'), 1) << health->output;
}

TEST(CoordinatorProcessTest, PlaintextMustBeAskedFor) {
  auto coordinator = StartCoordinator({});
  ASSERT_FALSE(coordinator.ok());
  EXPECT_NE(coordinator.status().message().find("--tls_cert/--tls_key: required unless --insecure"),
            std::string::npos)
      << coordinator.status();
}

TEST(CoordinatorProcessTest, BadDurationFlagsAreRefusedNamingTheFlag) {
  const std::pair<std::string, std::string> cases[] = {
      {"--forget_lost_node_after=-1", "--forget_lost_node_after: must be >= 0"},
      {"--lost_after=0.5", "--lost_after: must be longer than --heartbeat_interval"},
      {"--restart_backoff=-1", "--restart_backoff: must be >= 0"},
      {"--ended_job_retention=-1", "--ended_job_retention: must be >= 0"},
  };
  for (const auto& [flag, message] : cases) {
    auto coordinator = StartCoordinator({"--insecure", flag});
    ASSERT_FALSE(coordinator.ok()) << flag;
    EXPECT_NE(coordinator.status().message().find(message), std::string::npos)
        << coordinator.status();
  }
}

// A metrics port already taken is an error that names the flag and the reason, and a clean exit:
// nothing that runs in the background has started yet.
TEST(CoordinatorProcessTest, ABusyMetricsPortIsAnErrorNotACrash) {
  const int taken = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(taken, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string busy = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  auto result =
      RunCommand({"coordinator/coordinator", "--insecure", "--listen=127.0.0.1:0",
                  "--state=" + TestTempDir() + "/busy_metrics.db", "--metrics_listen=" + busy},
                 "");
  close(taken);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 75) << result->output;  // retryable; -1 had it died of SIGABRT
  EXPECT_NE(result->output.find("--metrics_listen: cannot listen on " + busy), std::string::npos)
      << result->output;
  EXPECT_EQ(result->output.find("terminate called"), std::string::npos) << result->output;
}

TEST(CoordinatorProcessTest, RingctlUsageErrors) {
  auto result = RunRingctl({"frobnicate"});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->exit_code, 2);
  EXPECT_NE(result->output.find("unknown command \"frobnicate\""), std::string::npos);

  result = RunRingctl({"--insecure", "health"});  // No address anywhere.
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->exit_code, 1);
  EXPECT_NE(result->output.find("--coordinator: not set"), std::string::npos) << result->output;
}

}  // namespace
}  // namespace ringmaster::testing
