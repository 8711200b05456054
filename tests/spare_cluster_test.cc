// Hot spares end to end (issue 38 point 4): four real agents (one CPU slot each) and a 2-node
// builtin-trainer job (DP 2) with spares: 1, so a third agent is held idle for it, with a
// standby trainer process pre-started there (docs/agent.md). After the
// job's first checkpoint the agent of its rank 1 is SIGKILLed for good: the coordinator relaunches
// the job at once on the survivor and the spare ("spare agent-S replaced agent-L"), at its full
// DP 2 from the checkpoint, and it ends SUCCEEDED. Without the spare's release before the
// relaunch the job would wait RESTARTING for a node that never comes. The rank placed on the
// spare is its pre-started standby (the same pid), the fourth agent becomes the new spare, and no
// standby is left once the job has ended.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Pids of the standby trainer processes (argv holds --standby_fd) whose parent is in `parents`.
std::vector<pid_t> StandbysOf(const std::set<pid_t>& parents) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadFile(entry.path().string() + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 2));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (!parents.count(ppid)) continue;
    if (ReadFile(entry.path().string() + "/cmdline").find("--standby_fd") != std::string::npos) {
      found.push_back(std::stoi(name));
    }
  }
  return found;
}

TEST(SpareClusterTest, AKilledAgentIsReplacedByTheSpareAndTheJobSucceeds) {
  const std::string dir = TestTempDir() + "/spare_cluster";
  std::filesystem::remove_all(dir);
  TestClusterOptions options;
  options.agents = 4;
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
  std::set<pid_t> agents;
  for (int i = 0; i < cluster.agent_count(); ++i) agents.insert(cluster.agent(i).pid());
  // The spare's agent pre-starts the job's trainer process.
  ASSERT_TRUE(WaitFor([&] { return StandbysOf({cluster.agent(spare).pid()}).size() == 1; },
                      absl::Seconds(60)));
  const pid_t standby = StandbysOf({cluster.agent(spare).pid()})[0];
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
  // Its rank on the spare was the standby pre-started there: the same process.
  const std::string spare_log = ReadFile(absl::StrCat(dir, "/agent-", spare, ".log"));
  ASSERT_TRUE(std::regex_search(
      spare_log, m,
      std::regex(absl::StrCat("launched rank (\\d+) of ", id,
                              " generation 2 as pid (\\d+) \\(a pre-started standby\\)"))))
      << spare_log;
  const int spare_rank = std::stoi(m[1].str());
  EXPECT_EQ(std::stoi(m[2].str()), standby);
  const std::string spare_rank_log = cluster.RankLog(id, 2, spare_rank);
  EXPECT_THAT(spare_rank_log,
              HasSubstr(absl::StrCat("pre-started standby (pid ", standby, ") took its assignment")));
  EXPECT_EQ(TrainerPid(spare_rank_log), standby);
  // The fourth agent was the next spare, with a standby of its own, stopped once the job ended;
  // no standby is left anywhere.
  int next_spare = -1;
  for (int i = 0; i < cluster.agent_count(); ++i) {
    if (i != spare && i != lost &&
        ReadFile(absl::StrCat(dir, "/agent-", i, ".log")).find("pre-started 1 standby") !=
            std::string::npos) {
      next_spare = i;
    }
  }
  ASSERT_GE(next_spare, 0) << described;
  EXPECT_TRUE(WaitFor(
      [&] {
        return ReadFile(absl::StrCat(dir, "/agent-", next_spare, ".log"))
                   .find("stopping 1 standby process(es): the node is no spare of the job any "
                         "more") != std::string::npos;
      },
      absl::Seconds(30)));
  agents.erase(cluster.agent(lost).pid());
  EXPECT_TRUE(WaitFor([&] { return StandbysOf(agents).empty(); }, absl::Seconds(30)));
}

}  // namespace
}  // namespace ringmaster::testing
