// The coordinator with agents on real gRPC streams (the simulated agents of bench/, which answer
// a launch by doing the rendezvous and reporting each rank done): a job runs to SUCCEEDED under
// `ringctl submit --wait`, and `ringctl nodes` shows the agents and what they hold.
#include <atomic>
#include <thread>

#include "bench/sim_agent_fleet.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace ringmaster::testing {
namespace {

bench::FleetOptions FleetOptionsFor(const CoordinatorProcess& coordinator, int agents, int devices,
                                    int channels) {
  bench::FleetOptions options;
  options.target = coordinator.address();
  options.agents = agents;
  options.devices_per_agent = devices;
  options.channels = channels;
  return options;
}

TEST(CoordinatorAgentsTest, SubmitWaitRunsAJobToSuccessOnAgents) {
  auto coordinator = StartCoordinator(
      {"--insecure", "--lost_after=60", "--state=" + TestTempDir() + "/agents.db"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  bench::SimAgentFleet fleet(FleetOptionsFor(*coordinator, 2, 2, 2));
  ASSERT_TRUE(fleet.Register(absl::Seconds(30)).ok());

  auto nodes = RunRingctl({"--insecure", "--coordinator=" + coordinator->address(), "nodes"});
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(nodes->exit_code, 0) << nodes->output;
  EXPECT_NE(nodes->output.find("sim-0"), std::string::npos) << nodes->output;
  EXPECT_NE(nodes->output.find("sim-1"), std::string::npos) << nodes->output;

  // small_job.yaml wants 1 node x 2 devices: it runs on one agent.
  auto run = RunRingctl({"--insecure", "--coordinator=" + coordinator->address(), "submit", "-f",
                         "tests/testdata/small_job.yaml", "--wait"});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->exit_code, 0) << run->output;
  EXPECT_NE(run->output.find("RUNNING: placed 2 ranks on 1 nodes (generation 1)"),
            std::string::npos)
      << run->output;
  EXPECT_NE(run->output.find("SUCCEEDED: all 2 ranks finished"), std::string::npos) << run->output;
  auto answers = fleet.WaitForRendezvous(2, absl::Seconds(10));
  ASSERT_TRUE(answers.ok()) << answers.status();
  EXPECT_EQ(*answers, 2);  // Rank 0's set and rank 1's wait both answered OK.
}

// The fleet is shut down (every stream cancelled) while a thread keeps sending heartbeats on
// them: a write must never start on a stream gRPC is done with (under --config=asan, which
// tools/test runs, such a write is a heap-use-after-free). Several fleets, for the race.
TEST(CoordinatorAgentsTest, AFleetShutsDownWhileHeartbeatsAreSent) {
  auto coordinator = StartCoordinator(
      {"--insecure", "--lost_after=60", "--state=" + TestTempDir() + "/shutdown.db"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  for (int round = 0; round < 20; ++round) {
    bench::SimAgentFleet fleet(FleetOptionsFor(*coordinator, 256, 1, 4));
    ASSERT_TRUE(fleet.Register(absl::Seconds(30)).ok());
    std::atomic<bool> stop{false};
    std::thread beats([&] {
      while (!stop.load()) fleet.HeartbeatAll();
    });
    fleet.HeartbeatAll();
    fleet.Shutdown();
    fleet.HeartbeatAll();  // after the cancel, too
    stop.store(true);
    beats.join();
  }  // each fleet waits for its streams to end, then frees its agents
}

}  // namespace
}  // namespace ringmaster::testing
