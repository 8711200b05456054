// A coordinator paused for longer than --lost_after (SIGSTOP, as a VM migration, a debugger or a
// swap storm would pause it) and then resumed. Its agents kept heartbeating into their open
// streams all along, unread: no node is lost and no job restarts. A node that really fell silent
// during the pause (its agent stopped too) is still lost, once the resumed coordinator has heard
// nothing from it for --lost_after.
#include <signal.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http_client.h"
#include "common/testing/series_value.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kLostAfter = absl::Seconds(2);

// One rank on each agent; each waits for the file `go`, then exits 0.
std::string Job(const std::string& go) {
  return absl::StrCat("name: paused\nnodes: 2\ndevices_per_node: 1\ntrainer:\n  steps: 1\n",
                      "  command: [\"/bin/sh\", \"-c\", \"while [ ! -e ", go,
                      " ]; do sleep 0.05; done\"]\n", "restart: {max_restarts: 3}\n");
}

class CoordinatorPauseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestCaseDir();
    TestClusterOptions options;
    options.slots = 1;
    options.agent_flags = AgentFlags();
    options.coordinator_flags = CoordinatorFlags();
    auto cluster = TestCluster::Start(dir_, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    id_ = cluster_->Submit("paused", Job(dir_ + "/go"));
    ASSERT_FALSE(id_.empty());
    ASSERT_TRUE(WaitFor(
        [&] {
          return cluster_->Ctl({"get", "job", id_}).output.find("RUNNING") != std::string::npos;
        },
        absl::Seconds(60)))
        << cluster_->Ctl({"describe", "job", id_}).output;
  }

  virtual std::vector<std::string> CoordinatorFlags() const {
    return {absl::StrCat("--lost_after=", absl::ToDoubleSeconds(kLostAfter)),
            "--heartbeat_interval=0.2"};
  }
  // Well past the pauses here: the agents keep their streams through them.
  virtual std::vector<std::string> AgentFlags() const { return {"--coordinator_timeout=60"}; }

  // How many times agent `i` has connected to the coordinator.
  int Connections(int i) {
    return Occurrences(cluster_->agent(i).Log(), "connected to the coordinator");
  }
  // How many times the coordinator has registered agent `i`.
  int Registrations(int i) {
    return Occurrences(cluster_->coordinator().process.Log(),
                       absl::StrCat("agent agent-", i, " registered with "));
  }
  static int Occurrences(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
      ++n;
    }
    return n;
  }

  // Stops the coordinator for three times --lost_after. The length of the pause is the fault
  // itself, not a wait for something to happen.
  void PauseTheCoordinator() {
    cluster_->coordinator().process.Signal(SIGSTOP);
    absl::SleepFor(3 * kLostAfter);
    cluster_->coordinator().process.Signal(SIGCONT);
  }

  // Lets both ranks exit 0 and waits until the job ends; returns its state ("" on timeout).
  std::string LetTheJobEnd() {
    std::ofstream(dir_ + "/go") << "go\n";
    return cluster_->WaitForEnd(id_, absl::Seconds(60));
  }

  // The coordinator's ringmaster_coordinator_stall_seconds_count, or NaN if not exposed.
  double StallsCounted() {
    auto page = HttpGet("127.0.0.1", cluster_->coordinator().metrics_port, "/metrics");
    return SeriesValue(page.ok() ? page->body : "", "ringmaster_coordinator_stall_seconds_count");
  }

  std::string dir_, id_;
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(CoordinatorPauseTest, NoNodeIsLostAndTheJobRunsOn) {
  PauseTheCoordinator();
  // The job ends after the coordinator has run its liveness check on resuming (it must have
  // handled both ranks' exits): had that check counted the pause as silence, both nodes would
  // have been lost and the job restarted.
  ASSERT_EQ(LetTheJobEnd(), "SUCCEEDED") << cluster_->Ctl({"describe", "job", id_}).output;
  const std::string log = cluster_->coordinator().process.Log();
  EXPECT_THAT(log, Not(HasSubstr(": lost"))) << log;
  EXPECT_THAT(log, HasSubstr("coordinator stalled for "));
  EXPECT_THAT(cluster_->Ctl({"get", "job", id_, "-o", "json"}).output,
              HasSubstr("\"restarts\": 0,"));
  EXPECT_GE(StallsCounted(), 1);
}

TEST_F(CoordinatorPauseTest, ANodeSilentThroughThePauseIsStillLost) {
  // agent-1 stops just before the coordinator does and stays stopped.
  cluster_->agent(1).Signal(SIGSTOP);
  PauseTheCoordinator();
  const std::string silent = "node agent-1 silent for";
  ASSERT_TRUE(WaitFor(
      [&] { return cluster_->coordinator().process.Log().find(silent) != std::string::npos; },
      absl::Seconds(30)))
      << cluster_->coordinator().process.Log();
  // agent-1 had been silent for as long as agent-0 when the coordinator resumed; only agent-0
  // spoke since.
  const std::string log = cluster_->coordinator().process.Log();
  EXPECT_THAT(log, Not(HasSubstr("node agent-0 silent for"))) << log;
  cluster_->agent(1).Signal(SIGCONT);
  EXPECT_EQ(LetTheJobEnd(), "SUCCEEDED") << cluster_->Ctl({"describe", "job", id_}).output;
}

// Paused for longer than the agents' --coordinator_timeout, the coordinator looks dead to them (as
// one whose host died without closing the connections would): its keepalive pings go unanswered,
// so each agent drops its connection and connects again, keeping its workers. The resumed
// coordinator finds, for each agent, an old stream closed and a new one registering, and handles
// the two in whichever order its threads read them: a registration read first replaces the
// session, and the old stream's end is then no loss; a closed stream read first loses the node,
// and its jobs too unless the agent registered again before the coordinator's ticker handed the
// loss on. Either way the job succeeds, restarted once if it lost a node (however many it lost),
// else not at all.
class CoordinatorPausePastTheAgentsTimeoutTest : public CoordinatorPauseTest {
 protected:
  std::vector<std::string> AgentFlags() const override { return {"--coordinator_timeout=2"}; }
};

TEST_F(CoordinatorPausePastTheAgentsTimeoutTest, TheAgentsConnectAgainAndTheJobSucceeds) {
  const int before[] = {Connections(0), Connections(1)};
  const int registered[] = {Registrations(0), Registrations(1)};
  cluster_->coordinator().process.Signal(SIGSTOP);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(WaitFor(
        [&] {
          return cluster_->agent(i).Log().find("keepalive watchdog timeout") != std::string::npos;
        },
        absl::Seconds(60)))
        << cluster_->agent(i).Log();
  }
  cluster_->coordinator().process.Signal(SIGCONT);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(WaitFor([&] { return Connections(i) > before[i]; }, absl::Seconds(60)))
        << cluster_->agent(i).Log();
    // Once registered again, an agent's old stream can no longer cost its jobs anything.
    EXPECT_TRUE(WaitFor([&] { return Registrations(i) > registered[i]; }, absl::Seconds(60)))
        << cluster_->coordinator().process.Log();
  }
  EXPECT_EQ(LetTheJobEnd(), "SUCCEEDED") << cluster_->Ctl({"describe", "job", id_}).output;
  const std::string job = cluster_->Ctl({"get", "job", id_, "-o", "json"}).output;
  const bool lost = absl::StrContains(job, "\"kind\": \"node_lost\"");
  EXPECT_THAT(job, HasSubstr(lost ? "\"restarts\": 1," : "\"restarts\": 0,"))
      << cluster_->coordinator().process.Log();
}

// Pinged every 2 s (--coordinator_timeout=4) on streams that carry nothing else for long
// (heartbeats 20 s apart; the coordinator sends nothing), the coordinator answers every ping: it
// accepts pings that often (by default a server closes such a connection after a few pings since
// the last data: 11 s here, when tried). Each ping may take 2 s to be answered.
class CoordinatorPingedOftenTest : public CoordinatorPauseTest {
 protected:
  std::vector<std::string> CoordinatorFlags() const override {
    return {"--lost_after=60", "--heartbeat_interval=20"};
  }
  std::vector<std::string> AgentFlags() const override { return {"--coordinator_timeout=4"}; }
};

TEST_F(CoordinatorPingedOftenTest, PingsAloneDoNotCostTheStreams) {
  const int before[] = {Connections(0), Connections(1)};
  // Eight ping intervals: the time is the condition, not a wait for something to happen.
  absl::SleepFor(absl::Seconds(16));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Connections(i), before[i]) << cluster_->agent(i).Log();
    EXPECT_THAT(cluster_->agent(i).Log(), Not(HasSubstr("coordinator stream broke")));
  }
  EXPECT_THAT(cluster_->coordinator().process.Log(), Not(HasSubstr("node lost")));
  EXPECT_EQ(LetTheJobEnd(), "SUCCEEDED") << cluster_->Ctl({"describe", "job", id_}).output;
}

}  // namespace
}  // namespace ringmaster::testing
