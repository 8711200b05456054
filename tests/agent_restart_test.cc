// The agent cluster across coordinator restarts: running workers are adopted by the next
// coordinator, finished ranks stay finished, rendezvous keys and waits survive, and an agent is
// ready only while its coordinator is. Real processes (agent_cluster_fixture.h).
#include "tests/agent_cluster_fixture.h"

namespace ringmaster::testing {
namespace {

TEST_F(AgentClusterTest, CoordinatorRestartAdoptsRunningWorkers) {
  // The ranks step for about 3 s, then wait for `release` (however long the restart takes), with
  // a watchdog that does not call that wait a hang.
  const std::string release = dir_ + "/release";
  const std::string file = JobFile(
      "adopt",
      absl::StrCat("\"--steps=60\", \"--step_seconds=0.05\", \"--hold_until_file=", release, "\""),
      0);
  std::ofstream(file, std::ios::app) << "watchdog: {hang_timeout: 600}\n";
  std::string id = Submit(file);
  ASSERT_TRUE(WaitFor([&] { return WorkerPid(id, 1, 3) > 0; }, absl::Seconds(30)));
  pid_t rank0 = WorkerPid(id, 1, 0);

  // The coordinator dies mid-run; the agents keep their workers and reconnect to its successor,
  // which adopts them: same generation, no restart. Once the agents are back, `logs --follow`
  // streams the adopted rank's output until it exits.
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  EXPECT_EQ(kill(rank0, 0), 0);  // Still running.
  std::ofstream(release) << "go\n";
  CommandResult followed = Ctl({"logs", id, "--rank=0", "--follow"});
  EXPECT_EQ(followed.exit_code, 0) << followed.output;
  EXPECT_NE(followed.output.find("test_worker: started"), std::string::npos) << followed.output;
  ASSERT_TRUE(WaitFor(
      [&] {
        return Ctl({"get", "job", id}).output.find("SUCCEEDED") != std::string::npos;
      },
      absl::Seconds(60)))
      << Ctl({"describe", "job", id}).output;
  std::string described = Ctl({"describe", "job", id}).output;
  EXPECT_EQ(described.find("RESTARTING"), std::string::npos) << described;
  EXPECT_EQ(WorkerPid(id, 2, 0), 0);  // No second generation was launched.
}

// A coordinator stopped the ordinary way (SIGTERM: a rollout, a pod moved) ends its agents'
// streams, but that is not a loss of their nodes: the job, held running meanwhile, is not
// restarted, and the successor adopts its workers.
TEST_F(AgentClusterTest, ACoordinatorStoppedWithSigtermLeavesItsJobsRunning) {
  const std::string release = dir_ + "/release";
  const std::string file =
      JobFile("sigterm", absl::StrCat("\"--steps=2\", \"--hold_until_file=", release, "\""), 0);
  std::ofstream(file, std::ios::app) << "watchdog: {hang_timeout: 600}\n";
  std::string id = Submit(file);
  ASSERT_TRUE(WaitFor([&] { return WorkerPid(id, 1, 3) > 0; }, absl::Seconds(30)));
  const pid_t rank0 = WorkerPid(id, 1, 0);
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator(SIGTERM));
  EXPECT_EQ(kill(rank0, 0), 0);  // still running
  std::ofstream(release) << "go\n";
  const std::string described = WaitUntilDoneOrRestarting(id);
  EXPECT_NE(described.find("SUCCEEDED"), std::string::npos) << described;
  EXPECT_EQ(described.find("lost"), std::string::npos) << described;
  EXPECT_EQ(WorkerPid(id, 2, 0), 0);  // No second generation was launched.
}

// Ranks 0 and 1 finish, then the coordinator dies; ranks 2 and 3 finish under its successor. The
// agents list the exits they reported when they register again, so the successor knows ranks 0
// and 1 are done: the job succeeds in its first generation, with no restart.
TEST_F(AgentClusterTest, RanksThatFinishedBeforeACoordinatorRestartStayFinished) {
  const std::string release = dir_ + "/release";
  const std::string file = JobFile(
      "finish",
      absl::StrCat("\"--steps=2\", \"--hold_until_file=", release, "\", \"--hold_ranks=2,3\""), 0);
  // Ranks 2 and 3 report nothing while they wait: not a hang.
  std::ofstream(file, std::ios::app) << "watchdog: {hang_timeout: 600}\n";
  std::string id = Submit(file);
  ASSERT_TRUE(WaitFor(
      [&] {
        int exits = 0;
        for (const Subprocess& agent : agents_) {
          const std::string log = agent.Log();
          for (size_t at = log.find("exited: code 0"); at != std::string::npos;
               at = log.find("exited: code 0", at + 1)) {
            ++exits;
          }
        }
        return exits == 2;
      },
      absl::Seconds(30)))
      << agents_[0].Log() << agents_[1].Log();

  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  std::ofstream(release) << "go\n";
  const std::string described = WaitUntilDoneOrRestarting(id);
  EXPECT_NE(described.find("SUCCEEDED"), std::string::npos) << described;
  EXPECT_EQ(described.find("RESTARTING"), std::string::npos) << described;
  EXPECT_EQ(WorkerPid(id, 2, 0), 0);  // No second generation was launched.
}

// Rank 0 sets its rendezvous key, then the coordinator dies, and its successor starts with an
// empty store; the other ranks read the key only after that. Rank 0's agent sets the key again
// once it is registered with the successor, so the ranks find it: no restart.
TEST_F(AgentClusterTest, ARendezvousKeySetBeforeACoordinatorRestartIsStillThere) {
  const std::string release = dir_ + "/release";
  std::string id =
      Submit(JobFile("rvset",
                     absl::StrCat("\"--steps=2\", \"--rendezvous\", \"--hold_before_rendezvous\", "
                                  "\"--hold_ranks=1,2,3\", \"--hold_until_file=",
                                  release, "\""),
                     0));
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(RankLog(id, 1, 0), "rendezvous set hello"); },
                      absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  std::ofstream(release) << "go\n";
  const std::string described = WaitUntilDoneOrRestarting(id);
  EXPECT_NE(described.find("SUCCEEDED"), std::string::npos) << described;
  EXPECT_EQ(WorkerPid(id, 2, 0), 0);
  EXPECT_THAT(RankLog(id, 1, 3), HasSubstr("rendezvous hello=world"));
}

// An agent's /readyz (its Kubernetes readiness) says whether it is registered with the
// coordinator: ready, then 503 naming the coordinator while it is down, then ready again.
TEST_F(AgentClusterTest, AgentReadinessFollowsItsCoordinator) {
  const int port = MetricsPort(agents_[0]);
  ASSERT_GT(port, 0);
  auto readyz = [&]() -> std::pair<int, std::string> {
    auto r = HttpGet("127.0.0.1", port, "/readyz");
    return r.ok() ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
  };
  ASSERT_TRUE(WaitFor([&] { return readyz().first == 200; }, absl::Seconds(30))) << readyz().second;
  coordinator_->process.Signal(SIGKILL);
  ASSERT_TRUE(coordinator_->process.Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(WaitFor([&] { return readyz().first == 503; }, absl::Seconds(30)));
  EXPECT_THAT(readyz().second, HasSubstr(coordinator_->address())) << "names the coordinator";
  ASSERT_NO_FATAL_FAILURE(StartSuccessor());
  EXPECT_TRUE(WaitFor([&] { return readyz().first == 200; }, absl::Seconds(30))) << readyz().second;
}

// Ranks 1-3 wait for rank 0's key when the coordinator dies: their waits, registered with it,
// die with it. Their agents send them again to its successor, where rank 0 then sets the key: the
// waits are answered, no restart.
TEST_F(AgentClusterTest, RendezvousWaitsUnderWayWhenTheCoordinatorRestartsAreAnswered) {
  const std::string release = dir_ + "/release";
  std::string id =
      Submit(JobFile("rvwait",
                     absl::StrCat("\"--steps=2\", \"--rendezvous\", \"--hold_before_rendezvous\", "
                                  "\"--hold_ranks=0\", \"--hold_until_file=",
                                  release, "\""),
                     0));
  const std::string waiting =
      absl::StrCat("ringmaster_rendezvous_waiters{job_id=\"", id, "\"} 3\n");
  ASSERT_TRUE(WaitFor(
      [&] {
        auto page = HttpGet("127.0.0.1", coordinator_->metrics_port, "/metrics");
        return page.ok() && absl::StrContains(page->body, waiting);
      },
      absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  std::ofstream(release) << "go\n";
  const std::string described = WaitUntilDoneOrRestarting(id);
  EXPECT_NE(described.find("SUCCEEDED"), std::string::npos) << described;
  EXPECT_EQ(WorkerPid(id, 2, 0), 0);
  for (int rank : {1, 2, 3}) {
    EXPECT_THAT(RankLog(id, 1, rank), HasSubstr("rendezvous hello=world")) << rank;
  }
}

}  // namespace
}  // namespace ringmaster::testing
