// No false blame under a slow link (issue 37 point 4), on a real virtual network: four agents in
// network namespaces (tests/netns_cluster.h), each veth limited to 200 Mbit/s with tc (so "the
// others' rate" is known), and a job of the trainer across the four nodes, pipeline 2 x data 2:
// each pipeline's two stages, on two nodes, pass activations and gradients and share the loss,
// the stage times and the tied embedding (the "emb" group) over their link. Mid-run one agent's
// veth drops to 8 Mbit/s (4%). The steps slow down for everyone (about 20x), the ranks whose
// groups cross that link wait longest, and none of that is anyone's compute: the straggler
// detector flags nobody (no "straggler" event, no straggler mark in `ringctl describe job`, no
// ringmaster_straggler series on the coordinator), and nothing restarts. The ranks of different
// nodes talk over Gloo, never shared memory (issue 37 point 2). Needs root: skipped otherwise.
//
// How it fails without each fix (run here): with the trainer's old compute (the loss broadcast,
// stage-time all-gather and tied-embedding broadcast over the slow link counted as compute), the
// slow pipeline's last-stage rank is flagged at 8x its stage peer's compute; with that fixed but
// not the detector, at 1.2-1.7x (about 1.3 ms against 0.9 ms a step, in steps of 330 ms that
// were all waiting; StragglerOptions::min_step_share now weighs the excess against the step).
#include <filesystem>
#include <iostream>
#include <memory>
#include <regex>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
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
constexpr int64_t kSlow = 8'000'000;      // 4% of it
constexpr int kSlowAgent = 1;

// The highest step rank `rank` of generation 1 has printed ("step N/M ..."), or 0.
int64_t LastStep(NetnsCluster& cluster, const std::string& id, int rank) {
  const std::string log = cluster.RankLog(id, 1, rank);
  static const std::regex step_line("(^|\\n)step (\\d+)/");
  int64_t last = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), step_line);
       it != std::sregex_iterator(); ++it) {
    last = std::max<int64_t>(last, std::stoll((*it)[2].str()));
  }
  return last;
}

TEST(NetnsNoFalseBlameTest, ASlowLinkFlagsNoStraggler) {
  if (std::string why = NetnsCluster::Unsupported(); !why.empty()) GTEST_SKIP() << why;
  auto started =
      NetnsCluster::Start(TestTempDir() + "/netns_no_false_blame", NetnsClusterOptions{});
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<NetnsCluster> cluster = std::move(*started);
  for (int i = 0; i < cluster->agent_count(); ++i) {
    ASSERT_TRUE(cluster->Degrade(i, kOthers).ok()) << i;
  }

  // The trainer with its defaults (shared memory on), as a command job for one flag: one BLAS
  // thread per rank, as four nodes on this machine's cores have (each rank would otherwise take
  // every core, and OpenBLAS's idle threads spin, so a rank computing while the others wait
  // would compete with their spinning: slower compute that a machine of its own would not see).
  // The link check's exchanges kept small, so the automatic check over the slow link is short.
  // The job runs until cancelled.
  const std::string id = cluster->Submit(
      "blame", absl::StrCat("name: blame\nnodes: 4\ndevices_per_node: 1\n"
                            "parallelism: {tensor: 1, pipeline: 2, data: 2}\n"
                            "trainer:\n  command: [\"",
                            std::filesystem::absolute("trainer/trainer").string(),
                            "\", \"--blas_threads=1\"]\n"
                            "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
                            "  batch: {micro_batch: 2, global_batch: 8}\n"
                            "  optimizer: {lr: 2.0e-3}\n  steps: 1000000\n"
                            "restart: {max_restarts: 0}\nwatchdog: {link_check_bytes: 65536}\n"));
  ASSERT_FALSE(id.empty());
  absl::Cleanup cancel = [&] { cluster->Ctl({"cancel", id}); };

  // Healthy steps first: enough 1 s summaries for the detector to have a level for every rank
  // (it judges after 5).
  int64_t step = 0;
  ASSERT_TRUE(
      WaitFor([&] { return (step = LastStep(*cluster, id, 0)) >= 100; }, absl::Seconds(120)))
      << "rank 0 reached step " << step << "\n"
      << cluster->Ctl({"describe", "job", id}).output << cluster->RankLog(id, 1, 0);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(cluster->RankLog(id, 1, rank), Not(HasSubstr("collectives through shared memory")))
        << "rank " << rank << ": ranks of different nodes must not share memory";
  }

  ASSERT_TRUE(cluster->Degrade(kSlowAgent, kSlow).ok());
  const int64_t degraded_at = LastStep(*cluster, id, 0);
  const absl::Time degraded_time = absl::Now();
  // Long enough for a flag: the detector needs 5 summaries over its threshold in a row, judged
  // on medians of the last 8, so 30 summaries (a step or more each) give it every chance.
  ASSERT_TRUE(WaitFor([&] { return (step = LastStep(*cluster, id, 0)) >= degraded_at + 30; },
                      absl::Seconds(180)))
      << "rank 0 reached step " << step << " (degraded at " << degraded_at << ")";
  // And at least 12 s of summaries, however fast the steps were.
  const absl::Time enough = degraded_time + absl::Seconds(12);
  ASSERT_TRUE(WaitFor([&] { return absl::Now() >= enough && LastStep(*cluster, id, 0) > step; },
                      absl::Seconds(60)));

  const std::string described = cluster->Ctl({"describe", "job", id}).output;
  EXPECT_THAT(described, HasSubstr("State:        RUNNING"));
  // No straggler event, and no rank marked one in the assignments table.
  EXPECT_THAT(described, Not(HasSubstr("  straggler  ")));
  EXPECT_FALSE(std::regex_search(described, std::regex("straggler \\(\\d")));
  EXPECT_THAT(described, Not(HasSubstr("RESTARTING")));
  const auto metrics =
      HttpGet("127.0.0.1", cluster->coordinator().metrics_port, "/metrics", absl::Seconds(10));
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(metrics->body, Not(HasSubstr("ringmaster_straggler{job_id=\"" + id + "\"")));

  if (HasFailure()) {
    std::cout << described << std::endl;
    for (int rank = 0; rank < 4; ++rank) {  // each rank's last steps: step_ms and comm_ms
      const std::string log = cluster->RankLog(id, 1, rank);
      std::cout << "rank " << rank << ":\n"
                << log.substr(log.size() > 1500 ? log.size() - 1500 : 0);
    }
  }

  ASSERT_TRUE(cluster->Restore(kSlowAgent).ok());
  std::move(cancel).Cancel();
  EXPECT_EQ(cluster->Ctl({"cancel", id}).exit_code, 0);
  EXPECT_EQ(cluster->WaitForEnd(id, absl::Seconds(60)), "CANCELLED");
}

}  // namespace
}  // namespace ringmaster::testing
