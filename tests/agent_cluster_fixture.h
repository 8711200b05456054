// The fixture of the agent cluster tests (agent_cluster_test.cc, agent_restart_test.cc): a real
// coordinator and two real agents on loopback, with helpers to submit command jobs of the test
// worker and read their state. Single-threaded (gtest). Each case owns its processes and its
// TEST_TMPDIR subdirectory; everything is stopped in TearDown, also after a failed assertion.
#ifndef RINGMASTER_TESTS_AGENT_CLUSTER_FIXTURE_H_
#define RINGMASTER_TESTS_AGENT_CLUSTER_FIXTURE_H_

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/oom_score.h"
#include "agent/testing/memory_cgroup.h"
#include "common/grpc_client.h"
#include "common/http_client.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/worker.grpc.pb.h"
#include "tests/local_cluster.h"
#include "tests/promtool_check.h"

namespace ringmaster::testing {


using ::testing::HasSubstr;
using ::testing::Not;

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class AgentClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestCaseDir();
    auto c = StartCoordinator({"--insecure", "--state=" + dir_ + "/state.db", "--stop_grace=2",
                               "--flap_hold=1800"});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::make_unique<CoordinatorProcess>(std::move(*c));
    // Unix socket paths must be short (107 bytes); Bazel's temp dir is not.
    char short_dir[] = "/tmp/rm-sock-XXXXXX";
    ASSERT_NE(mkdtemp(short_dir), nullptr);
    socket_dir_ = short_dir;
    for (int i = 0; i < 2; ++i) {
      std::string work = absl::StrCat(dir_, "/agent-", i);
      sockets_.push_back(absl::StrCat(socket_dir_, "/agent-", i, ".sock"));
      std::vector<std::string> argv = {"agent/agent",
                                       "--insecure",
                                       "--coordinator=" + coordinator_->address(),
                                       absl::StrCat("--node_name=agent-", i),
                                       "--devices=cpu:2",
                                       "--work_dir=" + work,
                                       "--worker_socket=" + sockets_.back(),
                                       "--metrics_listen=127.0.0.1:0",
                                       "--stop_grace=2"};
      for (const std::string& flag : ExtraAgentFlags()) argv.push_back(flag);
      auto agent = Subprocess::Start(argv, work + ".log");
      ASSERT_TRUE(agent.ok()) << agent.status();
      agents_.push_back(std::move(*agent));
      work_dirs_.push_back(work);
    }
    ASSERT_TRUE(WaitFor(
        [&] {
          auto nodes = Ctl({"nodes"});
          return nodes.output.find("agent-0") != std::string::npos &&
                 nodes.output.find("agent-1") != std::string::npos;
        },
        absl::Seconds(30)))
        << agents_[0].Log();
    worker_ = std::filesystem::absolute("agent/testing/test_worker").string();
  }

  virtual std::vector<std::string> ExtraAgentFlags() const { return {}; }

  CommandResult Ctl(std::vector<std::string> args) {
    std::vector<std::string> full = {"--insecure", "--coordinator=" + coordinator_->address()};
    full.insert(full.end(), args.begin(), args.end());
    auto r = RunRingctl(full);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : CommandResult{};
  }

  // A 2-node x 2-slot command job running the test worker with `worker_flags`.
  std::string JobFile(const std::string& name, const std::string& worker_flags, int max_restarts) {
    std::string path = dir_ + "/" + name + ".yaml";
    std::ofstream(path) << "name: " << name << "\n"
                        << "nodes: 2\ndevices_per_node: 2\n"
                        << "parallelism: {tensor: 1, pipeline: 1, data: 4}\n"
                        << "trainer:\n  command: [\"" << worker_ << "\", " << worker_flags
                        << "]\n  steps: 3\n"
                        << "restart: {max_restarts: " << max_restarts << "}\n";
    return path;
  }

  std::string Submit(const std::string& file) {
    CommandResult r = Ctl({"submit", "-f", file});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    std::regex re("job (\\S+) submitted");
    return std::regex_search(r.output, m, re) ? m[1].str() : "";
  }

  // The /metrics port an agent logged, or 0.
  static int MetricsPort(const Subprocess& agent) {
    std::smatch m;
    std::string log = agent.Log();
    int port = 0;
    if (std::regex_search(log, m, std::regex("agent metrics listening on [0-9.]+:(\\d+)"))) {
      absl::SimpleAtoi(m[1].str(), &port);
    }
    return port;
  }

  // The output of `rank` of `job` generation `gen`, on whichever agent ran it; "" if none did.
  std::string RankLog(const std::string& job, int gen, int rank) {
    std::string log;
    for (const auto& work : work_dirs_) {
      log += ReadFile(absl::StrCat(work, "/logs/", job, "/", gen, "/rank-", rank, ".log"));
    }
    return log;
  }

  // The pid the test worker logged for `rank` of `job` generation `gen`, on whichever agent.
  pid_t WorkerPid(const std::string& job, int gen, int rank) {
    const std::string log = RankLog(job, gen, rank);
    std::smatch m;
    int pid = 0;
    if (std::regex_search(log, m, std::regex("test_worker: started pid=(\\d+)")) &&
        absl::SimpleAtoi(m[1].str(), &pid)) {
      return pid;
    }
    return 0;
  }

  // The worker API token the agent launched the rank with (RINGMASTER_WORKER_TOKEN in the
  // worker's /proc/PID/environ); "" if it cannot be read.
  std::string WorkerToken(const std::string& job, int gen, int rank) {
    const pid_t pid = WorkerPid(job, gen, rank);
    if (pid <= 0) return "";
    const std::string variables = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    for (absl::string_view entry : absl::StrSplit(variables, '\0')) {
      if (absl::ConsumePrefix(&entry, "RINGMASTER_WORKER_TOKEN=")) return std::string(entry);
    }
    return "";
  }

  // Waits until the job is SUCCEEDED, RESTARTING or FAILED, and returns `describe job`.
  std::string WaitUntilDoneOrRestarting(const std::string& id) {
    EXPECT_TRUE(WaitFor(
        [&] {
          const std::string state = Ctl({"get", "job", id}).output;
          return state.find("SUCCEEDED") != std::string::npos ||
                 state.find("RESTARTING") != std::string::npos ||
                 state.find("FAILED") != std::string::npos;
        },
        absl::Seconds(90)));
    return Ctl({"describe", "job", id}).output;
  }

  // Stops the coordinator with `signal` (SIGTERM: it must exit cleanly), starts its successor on
  // the same address and state, and waits until both agents are registered with it again.
  void RestartCoordinator(int signal = SIGKILL) {
    coordinator_->process.Signal(signal);
    absl::StatusOr<int> exit = coordinator_->process.Wait(absl::Seconds(30));
    ASSERT_TRUE(exit.ok()) << exit.status();
    if (signal == SIGTERM) {
      EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << *exit;
    }
    StartSuccessor();
  }

  // Starts a coordinator on the dead one's address and state; waits for both agents.
  void StartSuccessor() {
    const std::string address = coordinator_->address();
    auto c = StartCoordinator(
        {"--insecure", "--state=" + dir_ + "/state.db", "--stop_grace=2", "--listen=" + address});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::make_unique<CoordinatorProcess>(std::move(*c));
    ASSERT_TRUE(WaitFor(
        [&] {
          std::string nodes = Ctl({"nodes"}).output;
          return std::count(nodes.begin(), nodes.end(), '\n') == 3 &&
                 nodes.find("LOST") == std::string::npos;
        },
        absl::Seconds(30)));
  }

  void TearDown() override {
    agents_.clear();  // SIGKILLs the agents' process groups.
    std::filesystem::remove_all(socket_dir_);
  }

  std::string dir_, worker_, socket_dir_;
  std::vector<std::string> sockets_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::vector<Subprocess> agents_;
  std::vector<std::string> work_dirs_;
};

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_AGENT_CLUSTER_FIXTURE_H_
