// An agent with a small --log_budget_mb on a real cluster: when a new job's workers start, the
// logs of a finished job are removed to make room, the running job's logs are kept even though
// they alone exceed the budget, `ringctl logs` for the removed ones says so plainly, and the
// agent exports how many bytes of logs it keeps.
#include <string>

#include "absl/strings/str_cat.h"
#include "common/http_client.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

// A one-rank command job printing the numbers 1..2000 (8,893 bytes), then running on when `stay`.
std::string CountingJob(const std::string& name, bool stay) {
  return absl::StrCat("name: ", name,
                      "\nnodes: 1\ndevices_per_node: 1\nrestart: {max_restarts: 0}\n"
                      "trainer:\n  steps: 1\n  command: [\"/bin/sh\", \"-c\", \"seq 1 2000",
                      stay ? "; exec sleep 600" : "", "\"]\n");
}

TEST(AgentLogsTest, OldLogsMakeRoomForNewOnesWithinTheBudget) {
  const std::string dir = TestTempDir() + "/agent_logs";
  TestClusterOptions options;
  options.agents = 1;
  options.slots = 1;
  options.agent_flags = {"--log_budget_mb=0.001"};  // 1,048 bytes
  auto cluster = TestCluster::Start(dir, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TestCluster& c = **cluster;

  const std::string first = c.Submit("first", CountingJob("first", false));
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(c.WaitForEnd(first, absl::Seconds(60)), "SUCCEEDED");

  const std::string second = c.Submit("second", CountingJob("second", true));
  ASSERT_FALSE(second.empty());
  ASSERT_TRUE(WaitFor([&] { return c.RankLog(second, 1, 0).find("\n2000\n") != std::string::npos; },
                      absl::Seconds(60)))
      << c.Ctl({"describe", "job", second}).output;
  // The second job's launch removes the first job's logs once its workers are started, so its
  // output may come first (and the agent's minutely prune may come before it); its own, over
  // the budget by themselves, stay while it runs.
  EXPECT_TRUE(WaitFor([&] { return c.RankLog(first, 1, 0).empty(); }, absl::Seconds(60)))
      << c.RankLog(first, 1, 0);
  EXPECT_THAT(c.RankLog(second, 1, 0), HasSubstr("\n1999\n2000\n"));
  const CommandResult logs = c.Ctl({"logs", first});
  EXPECT_NE(logs.exit_code, 0);
  EXPECT_THAT(logs.output, HasSubstr("no log for rank 0 of job " + first)) << logs.output;

  auto page = HttpGet("127.0.0.1", c.AgentMetricsPort(0), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(page->body, HasSubstr("# TYPE ringmaster_agent_log_bytes gauge"));

  EXPECT_EQ(c.Ctl({"cancel", second}).exit_code, 0);
  EXPECT_EQ(c.WaitForEnd(second, absl::Seconds(60)), "CANCELLED");
}

}  // namespace
}  // namespace ringmaster::testing
