// The coordinator and ringctl as real processes on loopback.
#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <utility>

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
  };
  for (const auto& [flag, message] : cases) {
    auto coordinator = StartCoordinator({"--insecure", flag});
    ASSERT_FALSE(coordinator.ok()) << flag;
    EXPECT_NE(coordinator.status().message().find(message), std::string::npos)
        << coordinator.status();
  }
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
