// The namespaced cluster (tests/netns_cluster.h) for real: four agents, each in its own network
// namespace behind a veth on one bridge, train a DP=4 job of the builtin trainer to SUCCEEDED,
// and the veths' byte counters show that the gradients crossed them; the fault helpers act on
// the link; and after the teardown nothing with the cluster's prefix is left (also a stale
// namespace of a process that died is removed at the next start). Needs root: skipped otherwise.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/netns_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::IsEmpty;

std::string ThreadNamespace() {
  std::error_code error;
  return std::filesystem::read_symlink("/proc/thread-self/ns/net", error).string();
}

// A pid that ran and is gone (reaped), for a namespace that looks left by a crashed test.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

int64_t Parameters(const std::string& rank_log) {
  std::smatch m;
  int64_t n = 0;
  if (std::regex_search(rank_log, m, std::regex(", (\\d+) parameters, "))) {
    (void)absl::SimpleAtoi(m[1].str(), &n);  // the regex guarantees digits
  }
  return n;
}

TEST(NetnsClusterTest, GradientsCrossTheVethsAndNothingIsLeftBehind) {
  if (std::string why = NetnsCluster::Unsupported(); !why.empty()) GTEST_SKIP() << why;
  const std::string stale = absl::StrCat("rmt", DeadPid(), "-0-hub");
  ASSERT_EQ(RunCommand({"ip", "netns", "add", stale}, "")->exit_code, 0);
  const std::string before = ThreadNamespace();

  NetnsClusterOptions options;  // four agents of one CPU slot
  auto started = NetnsCluster::Start(TestTempDir() + "/netns_cluster", options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<NetnsCluster> cluster = std::move(*started);
  const std::string prefix = cluster->prefix();
  EXPECT_THAT(NetnsCluster::NamespacesWithPrefix(stale), IsEmpty()) << "the stale one is gone";
  EXPECT_NE(ThreadNamespace(), before) << "the test runs in the hub";
  EXPECT_EQ(NetnsCluster::NamespacesWithPrefix(prefix).size(), 5u);  // hub + 4 agents

  // Every agent talks to the coordinator from its own address, over its veth.
  for (int i = 0; i < 4; ++i) {
    auto sockets = RunCommand({"ip", "netns", "exec", cluster->agent_namespace(i), "ss", "-Htn",
                               "state", "established", "dst", cluster->coordinator_address()},
                              "");
    // "10.77.0.2:PORT", or "[::ffff:10.77.0.2]:PORT" from a dual-stack socket.
    const std::string& out = sockets->output;
    EXPECT_TRUE(out.find(" " + cluster->agent_address(i) + ":") != std::string::npos ||
                out.find(":" + cluster->agent_address(i) + "]:") != std::string::npos)
        << "agent " << i << ": " << out;
  }

  std::vector<LinkCounters> start(4);
  for (int i = 0; i < 4; ++i) {
    auto bytes = cluster->LinkBytes(i);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    start[i] = *bytes;
  }
  constexpr int kSteps = 10;
  const std::string id = cluster->Submit(
      "dp4", absl::StrCat("name: dp4\nnodes: 4\ndevices_per_node: 1\n"
                          "parallelism: {tensor: 1, pipeline: 1, data: 4}\n"
                          "trainer:\n  command: [\"", std::filesystem::absolute("trainer/trainer").string(),
                          "\", \"--shared_memory=false\"]\n"
                          "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
                          "  batch: {micro_batch: 2, global_batch: 8}\n"
                          "  optimizer: {lr: 2.0e-3}\n  steps: ",
                          kSteps, "\nrestart: {max_restarts: 0}\n"));
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(cluster->WaitForEnd(id, absl::Seconds(120)), "SUCCEEDED")
      << cluster->Ctl({"describe", "job", id}).output << cluster->RankLog(id, 1, 0);

  // Each rank sends and receives at least its whole gradient every step (a ring all-reduce
  // moves 2(n-1)/n of it each way), fp32: the veth of every agent carried that much.
  const int64_t parameters = Parameters(cluster->RankLog(id, 1, 0));
  ASSERT_GT(parameters, 0) << cluster->RankLog(id, 1, 0);
  for (int i = 0; i < 4; ++i) {
    auto bytes = cluster->LinkBytes(i);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_GE(bytes->to_agent - start[i].to_agent, kSteps * parameters * 4) << "agent " << i;
    EXPECT_GE(bytes->from_agent - start[i].from_agent, kSteps * parameters * 4) << "agent " << i;
  }

  // The fault helpers act on the link (checked by the effect on the qdisc and the link state).
  ASSERT_TRUE(cluster->Degrade(1, 10'000'000).ok());
  auto qdisc = RunCommand({"ip", "netns", "exec", cluster->hub_namespace(), "tc", "qdisc", "show",
                           "dev", "v1"},
                          "");
  EXPECT_NE(qdisc->output.find("tbf"), std::string::npos) << qdisc->output;
  EXPECT_TRUE(cluster->Restore(1).ok());
  EXPECT_TRUE(cluster->Restore(1).ok()) << "idempotent";
  qdisc = RunCommand({"ip", "netns", "exec", cluster->hub_namespace(), "tc", "qdisc", "show",
                      "dev", "v1"},
                     "");
  EXPECT_EQ(qdisc->output.find("tbf"), std::string::npos) << qdisc->output;
  ASSERT_TRUE(cluster->Cut(2).ok());
  auto link = RunCommand(
      {"ip", "-n", cluster->agent_namespace(2), "-o", "link", "show", "dev", "eth0"}, "");
  EXPECT_NE(link->output.find("NO-CARRIER"), std::string::npos) << link->output;
  ASSERT_TRUE(cluster->Heal(2).ok());
  EXPECT_FALSE(cluster->Degrade(4, 10'000'000).ok()) << "no agent 4";

  cluster.reset();
  EXPECT_EQ(ThreadNamespace(), before) << "back in the namespace it came from";
  EXPECT_THAT(NetnsCluster::NamespacesWithPrefix(prefix), IsEmpty());
  EXPECT_THAT(NetnsCluster::NamespacesWithPrefix("rmt" + std::to_string(getpid()) + "-"),
              IsEmpty());
  // No interface of the cluster ever lived in this namespace: none named like its veths' ends.
  const std::string links = RunCommand({"ip", "-o", "link", "show"}, "")->output;
  EXPECT_EQ(links.find(prefix), std::string::npos) << links;
}

}  // namespace
}  // namespace ringmaster::testing
