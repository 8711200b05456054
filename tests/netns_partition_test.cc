// A partition on the namespaced cluster (issue 37 point 5): three agents in their own network
// namespaces, a DP=2 builtin job on two of them (checkpoints every 20 steps). One job node's
// veth is cut while its agent and its worker live on: the coordinator declares the node lost
// within its liveness window, re-places the job on the remaining node and the spare, and the
// job ends SUCCEEDED with the final loss and parameters of an uncut run. When the partition
// heals, the agent registers again and the old generation's worker on it is stopped, and that
// worker committed no checkpoint after the one the new generation resumed from (the checkpoint
// directory's owner is the new generation). Needs root: skipped otherwise.
#include <sys/types.h>

#include <fstream>
#include <memory>
#include <regex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/netns_cluster.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 120;

std::string Job(const std::string& name, const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: ", name, "\nnodes: 2\ndevices_per_node: 1\n",
      "parallelism: {tensor: 1, pipeline: 1, data: 2}\ntrainer:\n  builtin: gpt\n"
      "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
      "  batch: {micro_batch: 2, global_batch: 8}\n"
      "  optimizer: {lr: 2.0e-3, warmup_steps: 10}\n  steps: ",
      kSteps, "\ncheckpoint: {dir: ", checkpoint_dir, ", every_steps: 20, keep: 10}\n",
      "restart: {max_restarts: 3}\n");
}

// The line the trainer ends with: final loss and the parameters' CRC-32C.
std::string FinalLine(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("training done: [^\n]*")) ? m[0].str() : "";
}

// Whether `pid` runs (a zombie has stopped).
bool Running(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

// The `ringctl nodes` line of `node`.
std::string NodeLine(NetnsCluster& cluster, const std::string& node) {
  const std::string nodes = cluster.Ctl({"nodes"}).output;
  const size_t at = nodes.find(node + " ");
  return at == std::string::npos ? "" : nodes.substr(at, nodes.find('\n', at) - at);
}

// The steps of the checkpoints a rank's log says it committed.
std::vector<int> CommittedSteps(const std::string& log) {
  std::vector<int> steps;
  const std::regex re("checkpoint at step (\\d+) committed");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it) {
    int step = 0;
    if (absl::SimpleAtoi((*it)[1].str(), &step)) steps.push_back(step);
  }
  return steps;
}

TEST(NetnsPartitionTest, ACutNodeIsLostTheJobMovesAndTheHealedNodesOldWorkerIsStopped) {
  if (std::string why = NetnsCluster::Unsupported(); !why.empty()) GTEST_SKIP() << why;
  NetnsClusterOptions options;
  options.agents = 3;  // two job nodes and a spare
  options.slots = 1;
  // A short liveness window; the agent gives up a coordinator connection whose pings go
  // unanswered within 2 s, so that it connects (and registers) again soon after the heal.
  options.coordinator_flags = {"--heartbeat_interval=0.2", "--lost_after=1.5"};
  options.agent_flags = {"--coordinator_timeout=2"};
  const std::string dir = TestTempDir() + "/netns_partition";
  auto started = NetnsCluster::Start(dir, options);
  ASSERT_TRUE(started.ok()) << started.status();
  NetnsCluster& cluster = **started;

  // The uncut run.
  const std::string baseline = cluster.Submit("baseline", Job("baseline", dir + "/ckpt-baseline"));
  ASSERT_FALSE(baseline.empty());
  ASSERT_EQ(cluster.WaitForEnd(baseline, absl::Seconds(300)), "SUCCEEDED")
      << cluster.Ctl({"describe", "job", baseline}).output;
  const std::string want = FinalLine(cluster.RankLog(baseline, 1, 0));
  ASSERT_THAT(want, HasSubstr(absl::StrCat("training done: ", kSteps, " steps")));

  // The same job, cut once its checkpoint at step 20 is committed.
  const std::string ckpt = dir + "/ckpt";
  const std::string id = cluster.Submit("cut", Job("cut", ckpt));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.RankLog(id, 1, 0).find("checkpoint at step 20 committed") !=
               std::string::npos;
      },
      absl::Seconds(120)))
      << cluster.RankLog(id, 1, 0);
  const int victim = cluster.RankAgent(id, 1, 1);
  ASSERT_GE(victim, 0);
  const std::string victim_node = absl::StrCat("agent-", victim);
  const pid_t old_worker = TrainerPid(cluster.RankLog(id, 1, 1));
  ASSERT_GT(old_worker, 0) << cluster.RankLog(id, 1, 1);
  ASSERT_TRUE(cluster.Cut(victim).ok());

  // Lost within the liveness window (1.5 s; the wait allows for a loaded machine).
  ASSERT_TRUE(WaitFor([&] { return NodeLine(cluster, victim_node).find("LOST") !=
                                   std::string::npos; },
                      absl::Seconds(30)))
      << NodeLine(cluster, victim_node);
  EXPECT_TRUE(cluster.agent(victim).Running()) << "the agent process lives on";
  // Generation 2 runs on the other two agents, from the newest checkpoint.
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.RankLog(id, 2, 0).find("resumed from the checkpoint at step") !=
                   std::string::npos &&
               cluster.RankLog(id, 2, 1).find("resumed from the checkpoint at step") !=
                   std::string::npos;
      },
      absl::Seconds(120)))
      << cluster.Ctl({"describe", "job", id}).output;
  EXPECT_NE(cluster.RankAgent(id, 2, 0), victim);
  EXPECT_NE(cluster.RankAgent(id, 2, 1), victim);
  std::smatch resumed;
  const std::string gen2 = cluster.RankLog(id, 2, 0);
  ASSERT_TRUE(std::regex_search(gen2, resumed,
                                std::regex("resumed from the checkpoint at step (\\d+)")));
  const int resumed_step = std::stoi(resumed[1].str());
  // Cut off, the old worker still runs (blocked on its peer): nothing could reach it.
  ASSERT_TRUE(Running(old_worker)) << cluster.RankLog(id, 1, 1);

  // The heal: the agent registers again, and the coordinator has its stale worker stopped.
  ASSERT_TRUE(cluster.Heal(victim).ok());
  EXPECT_TRUE(WaitFor([&] { return !Running(old_worker); }, absl::Seconds(60)))
      << "generation 1's rank 1 (pid " << old_worker << ") still runs on " << victim_node << "\n"
      << cluster.agent(victim).Log();
  EXPECT_TRUE(WaitFor([&] { return NodeLine(cluster, victim_node).find(" yes ") !=
                                   std::string::npos; },
                      absl::Seconds(30)))
      << NodeLine(cluster, victim_node);
  // Stopped by its agent on the coordinator's word when the agent registered again ("not part
  // of the job's current generation"), or gone by itself first: once the link is back its
  // Gloo peers' hosts answer its packets with resets (exit 75, a retryable failure).
  const std::string agent_log = cluster.agent(victim).Log();
  EXPECT_TRUE(agent_log.find("not part of the job's current generation") != std::string::npos ||
              agent_log.find(absl::StrCat("(pid ", old_worker, ") exited: code 75")) !=
                  std::string::npos)
      << agent_log;

  ASSERT_EQ(cluster.WaitForEnd(id, absl::Seconds(300)), "SUCCEEDED")
      << cluster.Ctl({"describe", "job", id}).output;
  const std::string described = cluster.Ctl({"describe", "job", id}).output;
  EXPECT_THAT(described, HasSubstr(absl::StrCat("node ", victim_node, " was lost")));
  EXPECT_EQ(FinalLine(cluster.RankLog(id, 2, 0)), want) << described;
  // No split brain: generation 2 owns the directory, and the cut-off generation 1 committed
  // nothing after the checkpoint generation 2 resumed from.
  std::ifstream owner(ckpt + "/OWNER");
  std::string owner_text((std::istreambuf_iterator<char>(owner)), std::istreambuf_iterator<char>());
  EXPECT_EQ(owner_text,
            absl::StrCat("ringmaster-checkpoint-owner 1\njob ", id, "\ngeneration 2\n"));
  for (int rank = 0; rank < 2; ++rank) {
    for (int step : CommittedSteps(cluster.RankLog(id, 1, rank))) {
      EXPECT_LE(step, resumed_step) << "generation 1 rank " << rank;
    }
  }
}

}  // namespace
}  // namespace ringmaster::testing
