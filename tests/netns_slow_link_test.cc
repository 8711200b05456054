// Unasked localisation of a slow link on a real virtual network (issue 37 point 3): four agents
// in network namespaces (tests/netns_cluster.h), a DP=4 job of the trainer; every veth limited to
// 200 Mbit/s with tc (so "the others' rate" is known), then one agent's to 4 Mbit/s (2%) mid-run.
// With nobody asking, the coordinator notices the job's step time rise without a compute
// slowdown, runs the link check, and names that agent's two ring links with both ranks and nodes
// (a slow_link event, `ringctl describe job`, ringmaster_slow_link). The veth restored, it checks
// again and says the links recovered (link_recovered events; the series gone). Nothing restarts,
// the job ends SUCCEEDED. Needs root: skipped otherwise.
#include <filesystem>
#include <iostream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http_client.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/netns_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kOthers = 200'000'000;  // bits per second, every veth
constexpr int64_t kSlow = 4'000'000;      // 2% of it
constexpr int kSlowAgent = 2;

int Count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

TEST(NetnsSlowLinkTest, ADegradedLinkIsNamedUnaskedAndItsRecoverySaid) {
  if (std::string why = NetnsCluster::Unsupported(); !why.empty()) GTEST_SKIP() << why;
  auto started = NetnsCluster::Start(TestTempDir() + "/netns_slow_link", NetnsClusterOptions{});
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<NetnsCluster> cluster = std::move(*started);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(cluster->Degrade(i, kOthers).ok()) << i;

  // About 25 steps a second at 200 Mbit/s (720 KB each way per rank and step), well under one
  // at 4 Mbit/s; 1500 steps leave a minute and more of healthy steps around the slow ones.
  const std::string id = cluster->Submit(
      "slow-link",
      absl::StrCat("name: slow-link\nnodes: 4\ndevices_per_node: 1\n"
                   "parallelism: {tensor: 1, pipeline: 1, data: 4}\n"
                   "trainer:\n  command: [\"",
                   std::filesystem::absolute("trainer/trainer").string(),
                   "\", \"--shared_memory=false\"]\n"
                   "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
                   "  batch: {micro_batch: 2, global_batch: 8}\n"
                   "  optimizer: {lr: 2.0e-3}\n  steps: 1500\n"
                   "restart: {max_restarts: 0}\n"
                   "watchdog: {link_check_bytes: 262144, auto_link_check_interval: 10}\n"));
  ASSERT_FALSE(id.empty());
  auto describe = [&] { return cluster->Ctl({"describe", "job", id}).output; };
  std::string described;
  // A baseline: the watch ignores the first steps and wants its window and 4 s of reports
  // besides. The network caps the rate (720 KB each way per rank and step at 25 MB/s: 29 ms at
  // least), so 400 steps take 11 s and more.
  ASSERT_TRUE(WaitFor(
      [&] {
        described = describe();
        return std::regex_search(described, std::regex("Progress: +step ([4-9]\\d\\d|\\d{4})"));
      },
      absl::Seconds(180)))
      << described;
  ASSERT_THAT(described, HasSubstr("State:        RUNNING")) << "ended before the fault";

  // The fault; nobody asks for a check.
  ASSERT_TRUE(cluster->Degrade(kSlowAgent, kSlow).ok());
  const absl::Time degraded = absl::Now();
  const std::string node = absl::StrCat("agent-", kSlowAgent);  // the fixture's node names
  const std::string slow_link = "slow_link +dp0: rank (\\d) \\(([^)]+)\\) <-> rank (\\d) \\(([^)]+)\\): ";
  ASSERT_TRUE(WaitFor(
      [&] {
        described = describe();
        return Count(described, slow_link) >= 2;
      },
      absl::Seconds(60)))
      << "no slow link named " << absl::ToDoubleSeconds(absl::Now() - degraded)
      << " s after the veth was slowed:\n"
      << described;
  const double named_after = absl::ToDoubleSeconds(absl::Now() - degraded);
  RecordProperty("named_after_seconds", std::to_string(named_after));
  std::cerr << "slow links named " << named_after << " s after the tc change\n";
  EXPECT_THAT(described, HasSubstr("link check started by the coordinator: step time "));
  // The two ring links of the slowed agent's rank, each with both ranks and nodes, and no other.
  int slow_rank = -1;
  const std::regex slow_link_re(slow_link);
  for (auto it = std::sregex_iterator(described.begin(), described.end(), slow_link_re);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& link = *it;
    EXPECT_TRUE(link[2].str() == node || link[4].str() == node) << link.str();
    EXPECT_NE(link[2].str(), link[4].str()) << link.str();
    const int rank = std::stoi(link[link[2].str() == node ? 1 : 3].str());
    EXPECT_TRUE(slow_rank == -1 || slow_rank == rank) << described;
    slow_rank = rank;
  }
  EXPECT_EQ(Count(described, slow_link), 2) << described;
  std::string page = HttpGet("127.0.0.1", cluster->coordinator().metrics_port, "/metrics")->body;
  EXPECT_EQ(Count(page, absl::StrCat("\nringmaster_slow_link\\{job_id=\"", id, "\",group=\"dp0\"")),
            2)
      << page;
  EXPECT_EQ(Count(page, absl::StrCat("\nringmaster_slow_link\\{job_id=\"", id, "\"[^}]*node=\"",
                                     node, "\"")),
            2)
      << page;

  // Restored: the coordinator checks again by itself and says so.
  ASSERT_TRUE(cluster->Restore(kSlowAgent).ok());
  const absl::Time restored = absl::Now();
  ASSERT_TRUE(WaitFor(
      [&] {
        described = describe();
        return Count(described, "link_recovered +dp0: rank \\d \\([^)]+\\) <-> rank \\d "
                                "\\([^)]+\\) recovered") >= 2;
      },
      absl::Seconds(90)))
      << "no recovery said " << absl::ToDoubleSeconds(absl::Now() - restored) << " s after the "
      << "veth was restored:\n"
      << described;
  EXPECT_THAT(described, HasSubstr("started by the coordinator to confirm the links recovered"));
  page = HttpGet("127.0.0.1", cluster->coordinator().metrics_port, "/metrics")->body;
  EXPECT_THAT(page, Not(HasSubstr(absl::StrCat("ringmaster_slow_link{job_id=\"", id))));

  // News, never a restart. (No straggler under a slow link is tests/netns_no_false_blame_test's.)
  ASSERT_EQ(cluster->WaitForEnd(id, absl::Seconds(300)), "SUCCEEDED") << describe();
  described = describe();
  EXPECT_THAT(described, HasSubstr("Restarts: 0 of 0")) << described;
  EXPECT_EQ(Count(described, "slow_link +dp0"), 2) << described;
}

}  // namespace
}  // namespace ringmaster::testing
