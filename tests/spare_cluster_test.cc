// Hot spares end to end (issue 38 point 4): three real agents (one CPU slot each) and a 2-node
// builtin-trainer job (DP 2) with spares: 1, so the third agent is held idle for it. After the
// job's first checkpoint the agent of its rank 1 is SIGKILLed for good: the coordinator relaunches
// the job at once on the survivor and the spare ("spare agent-S replaced agent-L"), at its full
// DP 2 from the checkpoint, and it ends SUCCEEDED. Without the spare's release before the
// relaunch the job would wait RESTARTING for a node that never comes.
#include <signal.h>

#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kSteps = 48;
constexpr int kEvery = 8;

TEST(SpareClusterTest, AKilledAgentIsReplacedByTheSpareAndTheJobSucceeds) {
  const std::string dir = TestTempDir() + "/spare_cluster";
  std::filesystem::remove_all(dir);
  TestClusterOptions options;
  options.agents = 3;
  options.slots = 1;
  auto started = TestCluster::Start(dir, options);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& cluster = **started;

  const std::string id = cluster.Submit(
      "spared",
      absl::StrCat("name: spared\nnodes: 2\ndevices_per_node: 1\nspares: 1\n",
                   "parallelism: {tensor: 1, pipeline: 1, data: 2}\n", "trainer:\n  builtin: gpt\n",
                   "  model: {layers: 2, d_model: 24, heads: 2, seq_len: 32, vocab: 128}\n",
                   "  batch: {micro_batch: 2, global_batch: 4}\n", "  steps: ", kSteps, "\n",
                   "checkpoint: {dir: ", dir, "/ckpt, every_steps: ", kEvery, ", keep: 4}\n",
                   "restart: {max_restarts: 3}\n"));
  ASSERT_FALSE(id.empty());
  // The third agent is held as the job's spare.
  std::smatch m;
  std::string described;
  ASSERT_TRUE(WaitFor(
      [&] {
        described = cluster.Ctl({"describe", "job", id}).output;
        return std::regex_search(described, m, std::regex("Spares: +agent-(\\d+) \\(idle\\)"));
      },
      absl::Seconds(60)))
      << described;
  const int spare = std::stoi(m[1].str());
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.RankLog(id, 1, 0).find(
                   absl::StrCat("checkpoint at step ", kEvery, " committed")) != std::string::npos;
      },
      absl::Seconds(120)))
      << cluster.RankLog(id, 1, 0);
  // Rank 1 is frozen first, so that rank 0 waits in its next all-reduce and the job cannot end
  // before the agent is gone; then that agent is killed for good (its workers with it).
  const pid_t victim = TrainerPid(cluster.RankLog(id, 1, 1));
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  const std::string json = cluster.Ctl({"get", "job", id, "-o", "json"}).output;
  ASSERT_TRUE(
      std::regex_search(json, m, std::regex("\"rank\":\\s*1,\\s*\"node\":\\s*\"agent-(\\d+)\"")))
      << json;
  const int lost = std::stoi(m[1].str());
  ASSERT_NE(lost, spare);
  cluster.agent(lost).Signal(SIGKILL);
  ASSERT_TRUE(cluster.agent(lost).Wait(absl::Seconds(30)).ok());
  (void)kill(victim, SIGKILL);  // already gone with its agent (PR_SET_PDEATHSIG) if all went well

  ASSERT_EQ(cluster.WaitForEnd(id, absl::Seconds(180)), "SUCCEEDED")
      << cluster.Ctl({"describe", "job", id}).output;
  described = cluster.Ctl({"describe", "job", id}).output;
  EXPECT_THAT(described, HasSubstr(absl::StrCat("spare agent-", spare, " replaced agent-", lost)));
  EXPECT_THAT(described, Not(HasSubstr("shrunk")));
  // The second generation ran on the spare at the full DP 2 and trained to the last step.
  const auto losses = TrainerLosses(cluster.RankLog(id, 2, 0));
  ASSERT_FALSE(losses.empty()) << cluster.RankLog(id, 2, 0);
  EXPECT_EQ(losses.back().first, kSteps);
}

}  // namespace
}  // namespace ringmaster::testing
