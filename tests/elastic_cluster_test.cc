// Elastic data parallelism end to end (issue 38): a builtin-trainer job of DP 4 over four real
// agents (one CPU slot each, ZeRO-1) with min_nodes 2 loses an agent for good after a
// checkpoint. No node replaces it and DP 3 does not divide the global batch, so the coordinator
// relaunches the job at DP 2 on two of the three agents left, with an "elastic" event saying
// why; the trainer resumes the newest checkpoint resharded to DP 2 with the global batch kept
// (two micro-batches per replica instead of one), the job SUCCEEDS, and its losses from the
// resumed step to the last equal the uninterrupted DP 4 run's.
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 48;
constexpr int kEvery = 8;

// The tolerance trainer_reshard_cluster_test established for a resharded resume (the same
// per-sequence gradients summed in another order): 1e-5 relative; a lost or doubled sample or a
// misplaced optimizer element is off by 1e-3 or more.
constexpr double kTolerance = 1e-5;

std::string Job(const std::string& name, int min_nodes, const std::string& dir) {
  return absl::StrCat(
      "name: ", name, "\nnodes: 4\n",
      min_nodes > 0 ? absl::StrCat("min_nodes: ", min_nodes, "\n") : "",
      "devices_per_node: 1\nparallelism: {tensor: 1, pipeline: 1, data: 4}\n",
      "trainer:\n  builtin: gpt\n  zero_stage: 1\n",
      "  model: {layers: 2, d_model: 24, heads: 2, seq_len: 32, vocab: 128}\n",
      "  batch: {micro_batch: 2, global_batch: 8}\n", "  steps: ", kSteps, "\n",
      "  optimizer: {lr: 3.0e-3, warmup_steps: 2, weight_decay: 0.1, clip_grad_norm: 1.0}\n",
      "checkpoint: {dir: ", dir, ", every_steps: ", kEvery, ", keep: 8}\n",
      "restart: {max_restarts: 5}\n");
}

// The first number after `"key":` in `json` (proto JSON quotes int64s), or -1.
int64_t JsonInt(const std::string& json, const std::string& key) {
  std::smatch m;
  int64_t value = -1;
  if (std::regex_search(json, m, std::regex("\"" + key + "\":\\s*\"?(\\d+)"))) {
    (void)absl::SimpleAtoi(m[1].str(), &value);  // the regex guarantees digits
  }
  return value;
}

TEST(ElasticClusterTest, ALostAgentShrinksTheJobToDp2OnTheSameTrajectory) {
  const std::string dir = TestTempDir() + "/elastic_cluster";
  std::filesystem::remove_all(dir);
  TestClusterOptions options;
  options.agents = 4;
  options.slots = 1;
  auto started = TestCluster::Start(dir, options);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& cluster = **started;

  const std::string straight = cluster.Submit("straight", Job("straight", 0, dir + "/straight"));
  ASSERT_FALSE(straight.empty());
  ASSERT_EQ(cluster.WaitForEnd(straight, absl::Seconds(180)), "SUCCEEDED")
      << cluster.Ctl({"describe", "job", straight}).output;
  const auto want = TrainerLosses(cluster.RankLog(straight, 1, 0));
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));

  const std::string id = cluster.Submit("elastic", Job("elastic", 2, dir + "/elastic"));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.RankLog(id, 1, 0).find(
                   absl::StrCat("checkpoint at step ", kEvery, " committed")) != std::string::npos;
      },
      absl::Seconds(120)))
      << cluster.RankLog(id, 1, 0);
  // Rank 3 is frozen first, so that its peers wait in their next all-reduce and the job cannot
  // end before its agent is gone; then that agent is killed for good (its workers with it).
  const pid_t victim = TrainerPid(cluster.RankLog(id, 1, 3));
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  const std::string json = cluster.Ctl({"get", "job", id, "-o", "json"}).output;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(json, m, std::regex("\"rank\":\\s*3,\\s*\"node\":\\s*\"agent-(\\d+)\"")))
      << json;
  const int lost = std::stoi(m[1].str());
  cluster.agent(lost).Signal(SIGKILL);
  ASSERT_TRUE(cluster.agent(lost).Wait(absl::Seconds(30)).ok());
  (void)kill(victim, SIGKILL);  // already gone with its agent (PR_SET_PDEATHSIG) if all went well

  const std::string end = cluster.WaitForEnd(id, absl::Seconds(180));
  const std::string described = cluster.Ctl({"describe", "job", id}).output;
  ASSERT_EQ(end, "SUCCEEDED") << described;
  EXPECT_THAT(described, HasSubstr(absl::StrCat("shrunk DP 4→2 (4→2 nodes): node agent-", lost,
                                                " lost, no spare")))
      << described;
  const int64_t generation =
      JsonInt(cluster.Ctl({"get", "job", id, "-o", "json"}).output, "generation");
  ASSERT_GE(generation, 2);
  const std::string log = cluster.RankLog(id, static_cast<int>(generation), 0);
  EXPECT_THAT(log, HasSubstr("rank 0/2 pid"));
  EXPECT_THAT(log, HasSubstr("from world=4 tp=1 pp=1 dp=4"));
  EXPECT_EQ(cluster.RankLog(id, static_cast<int>(generation), 2), "") << "only two ranks";
  const auto got = TrainerLosses(log);
  ASSERT_FALSE(got.empty()) << log;
  ASSERT_EQ(got.back().first, kSteps) << log;
  const size_t resumed = static_cast<size_t>(kSteps) - got.size();
  EXPECT_EQ(resumed % kEvery, 0u) << "resumed from a checkpoint step";
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& w = want[resumed + i];
    ASSERT_EQ(got[i].first, w.first);
    const double x = TrainerLossValue(w.second), y = TrainerLossValue(got[i].second);
    EXPECT_NEAR(y, x, kTolerance * std::abs(x)) << "step " << got[i].first;
    worst = std::max(worst, std::abs(y - x) / std::abs(x));
  }
  std::cout << "DP 4 -> 2 after losing agent-" << lost << ", resumed at step " << resumed
            << ": final loss " << got.back().second << " vs " << want.back().second
            << ", largest relative difference " << worst << "\n";
}

}  // namespace
}  // namespace ringmaster::testing
