// Cordon and drain on a real cluster (a coordinator, two agents, the builtin trainer): a cordoned
// node gets no placement; draining the node a job trains on makes its ranks checkpoint the step
// they agree on and exit, and the job restarts on the other node from exactly that step, without
// using a restart; the cordon survives a coordinator restart; ringctl names an unknown node. An
// agent stopped with --leave_checkpoint_grace has its jobs moved the same way.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A 2-rank data-parallel job on one node, with no periodic checkpoint within reach (the only one
// is the drain's); it is still training whenever the test acts (far more steps than the test
// waits for; the test cancels it).
std::string Job(const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: drained\nnodes: 1\ndevices_per_node: 2\n",
      "parallelism: {tensor: 1, pipeline: 1, data: 2}\n", "trainer:\n  builtin: gpt\n",
      "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n",
      "  batch: {micro_batch: 2, global_batch: 4}\n  optimizer: {lr: 2.0e-3}\n  steps: 1000000\n",
      "checkpoint: {dir: ", checkpoint_dir, ", every_steps: 100000, keep: 3}\n",
      "restart: {max_restarts: 0}\n");
}

// The nodes of the job's current placement, from `ringctl get job -o json`.
std::set<std::string> PlacedOn(TestCluster& c, const std::string& job) {
  const std::string json = c.Ctl({"get", "job", job, "-o", "json"}).output;
  std::set<std::string> nodes;
  const std::regex node("\"node\": \"([^\"]+)\"");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), node); it != std::sregex_iterator();
       ++it) {
    nodes.insert((*it)[1].str());
  }
  return nodes;
}

// Waits until rank 0 of generation 2 resumed, and checks that both ranks of generation 1 stopped
// after committing a checkpoint of exactly that step, having trained every step before it.
// Returns the step, or -1 (with a failure) if generation 2 never resumed.
int ResumedAtTheStepGenerationOneStopped(TestCluster& c, const std::string& id) {
  int step = -1;
  if (!WaitFor(
          [&] {
            // The match is read here: it points into `log`, which ends with this call.
            const std::string log = c.RankLog(id, 2, 0);
            std::smatch m;
            if (!std::regex_search(log, m,
                                   std::regex("resumed from the checkpoint at step (\\d+)"))) {
              return false;
            }
            step = std::stoi(m[1].str());
            return true;
          },
          absl::Seconds(120))) {
    ADD_FAILURE() << "generation 2 did not resume: " << c.Ctl({"describe", "job", id}).output;
    return -1;
  }
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = c.RankLog(id, 1, rank);
    EXPECT_THAT(log, HasSubstr(absl::StrCat("stopped on request (SIGUSR1) after step ", step,
                                            "; checkpoint at step ", step, " committed")))
        << log;
    EXPECT_EQ(static_cast<int>(TrainerLosses(log).size()), step) << log;
  }
  return step;
}

TEST(NodeDrainTest, DrainCheckpointsTheAgreedStepMovesTheJobThereAndTheCordonLasts) {
  const std::string dir = TestTempDir() + "/node_drain";
  std::filesystem::remove_all(dir);
  auto started = TestCluster::Start(dir, {});
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& c = **started;

  // agent-0 is cordoned: the job goes to agent-1.
  CommandResult cordon = c.Ctl({"cordon", "agent-0", "--reason=bad fan"});
  ASSERT_EQ(cordon.exit_code, 0) << cordon.output;
  EXPECT_THAT(cordon.output, HasSubstr("node agent-0 cordoned"));
  const std::string nodes = c.Ctl({"nodes"}).output;
  EXPECT_THAT(nodes, HasSubstr("CORDONED"));
  EXPECT_THAT(nodes, HasSubstr("agent-0: cordoned"));
  EXPECT_THAT(nodes, HasSubstr("bad fan"));
  const std::string id = c.Submit("drained", Job(dir + "/ckpt"));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] { return PlacedOn(c, id) == std::set<std::string>{"agent-1"}; },
                      absl::Seconds(30)))
      << c.Ctl({"describe", "job", id}).output;
  ASSERT_TRUE(
      WaitFor([&] { return TrainerLosses(c.RankLog(id, 1, 0)).size() >= 20; }, absl::Seconds(120)))
      << c.RankLog(id, 1, 0);

  // Uncordon agent-0 and drain agent-1: the job moves, without a restart (max_restarts is 0).
  ASSERT_EQ(c.Ctl({"uncordon", "agent-0"}).exit_code, 0);
  CommandResult drain = c.Ctl({"drain", "agent-1", "--reason=kernel upgrade"});
  ASSERT_EQ(drain.exit_code, 0) << drain.output;
  EXPECT_THAT(drain.output, HasSubstr(id));
  // Both ranks of generation 1 agree on a step, checkpoint it and exit; generation 2 resumes on
  // agent-0 from exactly that step: nothing trained before the drain is lost.
  const int resumed_at = ResumedAtTheStepGenerationOneStopped(c, id);
  EXPECT_GE(resumed_at, 20);
  ASSERT_TRUE(
      WaitFor([&] { return !TrainerLosses(c.RankLog(id, 2, 0)).empty(); }, absl::Seconds(120)))
      << c.RankLog(id, 2, 0);
  EXPECT_EQ(TrainerLosses(c.RankLog(id, 2, 0))[0].first, resumed_at + 1);
  EXPECT_EQ(PlacedOn(c, id), std::set<std::string>{"agent-0"});
  const std::string described = c.Ctl({"describe", "job", id}).output;
  EXPECT_THAT(described, HasSubstr("node agent-1 drained: kernel upgrade"));
  EXPECT_THAT(described, HasSubstr("asked to checkpoint has exited"));
  EXPECT_THAT(described, HasSubstr("Generation:   2   Restarts: 0 of 0"));
  ASSERT_EQ(c.Ctl({"cancel", id}).exit_code, 0);
  EXPECT_EQ(c.WaitForEnd(id, absl::Seconds(60)), "CANCELLED");

  // The cordon is stored: after a coordinator restart agent-1 is still cordoned.
  c.coordinator().process.Signal(SIGKILL);
  ASSERT_TRUE(c.coordinator().process.Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(c.RestartCoordinator().ok());
  const std::string after = c.Ctl({"nodes"}).output;
  EXPECT_THAT(after, HasSubstr("agent-1: cordoned"));
  EXPECT_THAT(after, HasSubstr("kernel upgrade"));
  EXPECT_THAT(after, Not(HasSubstr("agent-0: cordoned")));

  // A typo is refused, naming the node; a missing node name is a usage error.
  CommandResult typo = c.Ctl({"drain", "agent-7"});
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_THAT(typo.output, HasSubstr("node \"agent-7\" is not known"));
  EXPECT_EQ(c.Ctl({"cordon"}).exit_code, 2);
}

TEST(NodeDrainTest, AnAgentStoppedWithALeaveGraceHasItsJobCheckpointAndMoveWithoutARestart) {
  const std::string dir = TestTempDir() + "/node_leave";
  std::filesystem::remove_all(dir);
  TestClusterOptions options;
  options.agent_flags = {"--leave_checkpoint_grace=120"};
  auto started = TestCluster::Start(dir, options);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& c = **started;
  ASSERT_EQ(c.Ctl({"cordon", "agent-0"}).exit_code, 0);
  const std::string id = c.Submit("left", Job(dir + "/ckpt"));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(
      WaitFor([&] { return TrainerLosses(c.RankLog(id, 1, 0)).size() >= 10; }, absl::Seconds(120)))
      << c.Ctl({"describe", "job", id}).output;
  ASSERT_EQ(PlacedOn(c, id), std::set<std::string>{"agent-1"});
  ASSERT_EQ(c.Ctl({"uncordon", "agent-0"}).exit_code, 0);

  // What a node shutdown (or Kubernetes evicting the agent's pod) does: SIGTERM to the agent.
  c.agent(1).Signal(SIGTERM);
  EXPECT_GE(ResumedAtTheStepGenerationOneStopped(c, id), 10);
  absl::StatusOr<int> agent_exit = c.agent(1).Wait(absl::Seconds(60));
  ASSERT_TRUE(agent_exit.ok()) << agent_exit.status();
  EXPECT_TRUE(WIFEXITED(*agent_exit) && WEXITSTATUS(*agent_exit) == 0) << *agent_exit;
  EXPECT_EQ(PlacedOn(c, id), std::set<std::string>{"agent-0"});
  const std::string described = c.Ctl({"describe", "job", id}).output;
  EXPECT_THAT(described, HasSubstr("node agent-1 is shutting down (signal 15)"));
  EXPECT_THAT(described, HasSubstr("Generation:   2   Restarts: 0 of 0"));
  ASSERT_EQ(c.Ctl({"cancel", id}).exit_code, 0);
  EXPECT_EQ(c.WaitForEnd(id, absl::Seconds(60)), "CANCELLED");
}

// The devices the job's current assignments use on `node`, from `ringctl describe job`.
std::set<int> DevicesOn(TestCluster& c, const std::string& job, const std::string& node) {
  const std::string described = c.Ctl({"describe", "job", job}).output;
  std::set<int> devices;
  const std::regex row("\n +\\d+ +" + node + " +(\\d+) ");
  for (auto it = std::sregex_iterator(described.begin(), described.end(), row);
       it != std::sregex_iterator(); ++it) {
    devices.insert(std::stoi((*it)[1].str()));
  }
  return devices;
}

// The pid the test worker logged ("test_worker: started pid=P"), or 0.
pid_t TestWorkerPid(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("test_worker: started pid=(\\d+)"))
             ? std::stoi(m[1].str())
             : 0;
}

// Submits a job of two test workers that ignore SIGUSR1, placed on agent-0 and agent-1 (best fit,
// ties by name), and drains agent-0 once they run: the drain's stop then waits out its whole
// checkpoint grace on both agents. Returns the job's id, or "" after adding a failure.
std::string DrainAJobThatIgnoresSigusr1(TestCluster& c) {
  const std::string worker = TestCluster::Runfile("agent/testing/test_worker");
  const std::string id =
      c.Submit("stubborn", absl::StrCat("name: stubborn\nnodes: 2\ndevices_per_node: 1\n",
                                        "parallelism: {tensor: 1, pipeline: 1, data: 2}\n",
                                        "trainer:\n  command: [\"", worker,
                                        "\", \"--ignore_sigusr1\", \"--hang\"]\n  steps: 1\n",
                                        "restart: {max_restarts: 0}\n"));
  if (id.empty()) return "";  // Submit added the failure
  if (!WaitFor(
          [&] {
            return absl::StrContains(c.RankLog(id, 1, 0), "test_worker: hanging") &&
                   absl::StrContains(c.RankLog(id, 1, 1), "test_worker: hanging");
          },
          absl::Seconds(60))) {
    ADD_FAILURE() << "the workers did not start: " << c.Ctl({"describe", "job", id}).output;
    return "";
  }
  if (PlacedOn(c, id) != std::set<std::string>{"agent-0", "agent-1"}) {
    ADD_FAILURE() << "placed elsewhere: " << c.Ctl({"describe", "job", id}).output;
    return "";
  }
  const CommandResult drain = c.Ctl({"drain", "agent-0"});
  if (drain.exit_code != 0) {
    ADD_FAILURE() << drain.output;
    return "";
  }
  for (int agent = 0; agent < 2; ++agent) {
    if (!WaitFor([&] { return absl::StrContains(c.agent(agent).Log(), "SIGUSR1 first: up to"); },
                 absl::Seconds(30))) {
      ADD_FAILURE() << "agent-" << agent << " did not ask: " << c.agent(agent).Log();
      return "";
    }
  }
  return id;
}

// A stop that waits out its workers' checkpoint grace holds up only its own job: another job's
// launch on the same node goes ahead (it once waited behind the stop in the agent's command
// queue, for up to the whole grace), on a device the stopping worker does not use (the
// coordinator keeps that one held until the worker exits).
TEST(NodeDrainTest, AStopWaitingForItsWorkersDoesNotHoldUpAnotherJobsLaunchOnTheNode) {
  const std::string dir = TestTempDir() + "/node_drain_neighbour";
  std::filesystem::remove_all(dir);
  TestClusterOptions options;
  options.coordinator_flags = {"--drain_checkpoint_grace=3600"};
  auto started = TestCluster::Start(dir, options);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& c = **started;
  const std::string stubborn = DrainAJobThatIgnoresSigusr1(c);
  ASSERT_FALSE(stubborn.empty());
  ASSERT_THAT(c.agent(1).Log(), HasSubstr("SIGUSR1 first: up to 1h to checkpoint and exit"));

  // The only free slots are agent-1's, where the stop of `stubborn` is still waiting.
  const std::string neighbour =
      c.Submit("neighbour", absl::StrCat("name: neighbour\nnodes: 1\ndevices_per_node: 1\n",
                                         "trainer:\n  command: [\"",
                                         TestCluster::Runfile("agent/testing/test_worker"),
                                         "\", \"--hang\"]\n  steps: 1\n"));
  ASSERT_FALSE(neighbour.empty());
  EXPECT_TRUE(
      WaitFor([&] { return absl::StrContains(c.RankLog(neighbour, 1, 0), "test_worker: hanging"); },
              absl::Seconds(60)))
      << c.Ctl({"describe", "job", neighbour}).output << c.agent(1).Log();
  EXPECT_EQ(PlacedOn(c, neighbour), std::set<std::string>{"agent-1"});
  const std::set<int> stopping = DevicesOn(c, stubborn, "agent-1");
  const std::set<int> launched = DevicesOn(c, neighbour, "agent-1");
  ASSERT_EQ(stopping.size(), 1u);
  ASSERT_EQ(launched.size(), 1u);
  EXPECT_NE(*stopping.begin(), *launched.begin());
  // ... while both ranks of `stubborn` still run within their grace, and the job waits for them.
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = TestWorkerPid(c.RankLog(stubborn, 1, rank));
    ASSERT_GT(pid, 0);
    EXPECT_EQ(kill(pid, 0), 0) << "rank " << rank << " of " << stubborn << " is gone";
  }
  EXPECT_THAT(c.Ctl({"describe", "job", stubborn}).output, HasSubstr("RESTARTING"));
}

// A coordinator restarted while a drain waits for its ranks to checkpoint goes on waiting: it does
// not tell those ranks to stop again, keeps their devices held, and launches the next generation
// (from the checkpoint they write) only once they have exited. Here the ranks ignore SIGUSR1 and
// the test ends the wait by killing them.
TEST(NodeDrainTest, ACoordinatorRestartedDuringADrainGoesOnWaitingForTheRanks) {
  const std::string dir = TestTempDir() + "/node_drain_restart";
  std::filesystem::remove_all(dir);
  TestClusterOptions options;
  options.agents = 3;
  options.slots = 1;
  options.coordinator_flags = {"--drain_checkpoint_grace=3600"};
  auto started = TestCluster::Start(dir, options);
  ASSERT_TRUE(started.ok()) << started.status();
  TestCluster& c = **started;
  const std::string id = DrainAJobThatIgnoresSigusr1(c);
  ASSERT_FALSE(id.empty());

  c.coordinator().process.Signal(SIGKILL);
  ASSERT_TRUE(c.coordinator().process.Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(c.RestartCoordinator().ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string nodes = c.Ctl({"nodes"}).output;
        return absl::StrContains(nodes, "agent-1") && absl::StrContains(nodes, "agent-2") &&
               !absl::StrContains(nodes, "not registered");
      },
      absl::Seconds(30)));
  EXPECT_THAT(c.Ctl({"describe", "job", id}).output,
              HasSubstr("Waiting for:  ranks 0, 1 of generation 1 to checkpoint and exit"));
  // Both agents still have their rank; the wait ends when they exit.
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = TestWorkerPid(c.RankLog(id, 1, rank));
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGKILL), 0) << "rank " << rank << " is gone";
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(c.Ctl({"describe", "job", id}).output, "Generation:   2");
      },
      absl::Seconds(60)))
      << c.Ctl({"describe", "job", id}).output;
  const std::string described = c.Ctl({"describe", "job", id}).output;
  const size_t stopped = described.find("asked to checkpoint has exited: launching");
  const size_t launched = described.find("RUNNING: placed 2 ranks on 2 nodes (generation 2)");
  ASSERT_NE(stopped, std::string::npos) << described;
  ASSERT_NE(launched, std::string::npos) << described;
  EXPECT_LT(stopped, launched) << described;
  EXPECT_EQ(PlacedOn(c, id), (std::set<std::string>{"agent-1", "agent-2"}));
  EXPECT_THAT(described, HasSubstr("Restarts: 0 of 0"));
}

}  // namespace
}  // namespace ringmaster::testing
