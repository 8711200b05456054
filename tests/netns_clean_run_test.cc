// A clean run on a real virtual network raises no alarm (issue 37, "Done when"): four agents in
// network namespaces (tests/netns_cluster.h), every veth limited to the same 200 Mbit/s with tc,
// a job of the trainer across the four nodes, pipeline 2 x data 2 (so the link check measures
// "pp", "dp" and "emb" links, each kind between different nodes), 600 steps: 2,400 rank-steps
// with the start-up link check and the automatic one armed (a 10 s interval, as in
// tests/netns_slow_link_test.cc). Nothing is degraded, so nothing may be named: no "slow_link",
// "link_recovered" or "straggler" event, no link check the coordinator started by itself, no
// straggler mark in `ringctl describe job` while it trains, no restart; the job SUCCEEDED.
// Needs root: skipped otherwise. About 20 s here (2 cores, 2026-11-28).
//
// The check's exchanges (262144 bytes) are larger than the veths' tc burst (tbf's bucket, 250 KB
// at 200 Mbit/s, tests/netns_cluster.cc): an exchange that fits in a full bucket leaves at the
// veth's own speed, so with 64 KiB exchanges the links a rank measured first (full bucket)
// showed about 0.36 GB/s and the one it measured after them (empty bucket) the real 25 MB/s,
// and was named slow at 0.07x on a clean cluster. The shaper's burst, not the check: at the
// default 4 MiB, or on a NIC with no token bucket, it does not arise.
//
// How it fails (run here): with agent 1's veth at 4 Mbit/s from the start, the start-up check
// names its three links (pp1, emb1, dp0 slow_link events) and the test fails on them; with
// link_check_bytes 65536, the false "pp1 at 0.07x" above fails it too.
#include <filesystem>
#include <iostream>
#include <memory>
#include <regex>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/netns_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kRate = 200'000'000;  // bits per second, every veth
constexpr int kSteps = 600;             // x 4 ranks: 2,400 rank-steps

int Count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// Event lines of `kind` in `ringctl watch` or `ringctl describe job` output.
int Events(const std::string& text, const std::string& kind) {
  return Count(text, "(^|\n) *\\S+  gen \\d+  " + kind + "  ");
}

TEST(NetnsCleanRunTest, ACleanRunNamesNoSlowLinkAndNoStraggler) {
  if (std::string why = NetnsCluster::Unsupported(); !why.empty()) GTEST_SKIP() << why;
  auto started = NetnsCluster::Start(TestTempDir() + "/netns_clean_run", NetnsClusterOptions{});
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<NetnsCluster> cluster = std::move(*started);
  for (int i = 0; i < cluster->agent_count(); ++i) {
    ASSERT_TRUE(cluster->Degrade(i, kRate).ok()) << i;
  }

  // One BLAS thread per rank (see tests/netns_no_false_blame_test.cc: four nodes share this
  // machine's cores).
  const std::string id = cluster->Submit(
      "clean", absl::StrCat("name: clean\nnodes: 4\ndevices_per_node: 1\n"
                            "parallelism: {tensor: 1, pipeline: 2, data: 2}\n"
                            "trainer:\n  command: [\"",
                            std::filesystem::absolute("trainer/trainer").string(),
                            "\", \"--blas_threads=1\"]\n"
                            "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
                            "  batch: {micro_batch: 2, global_batch: 8}\n"
                            "  optimizer: {lr: 2.0e-3}\n  steps: ",
                            kSteps,
                            "\nrestart: {max_restarts: 0}\n"
                            "watchdog: {link_check_bytes: 262144, auto_link_check_interval: 10}\n"));
  ASSERT_FALSE(id.empty());
  absl::Cleanup cancel = [&] { cluster->Ctl({"cancel", id}); };

  // While it trains: no rank marked a straggler in any snapshot (a mark may come and go; its
  // events are checked at the end).
  std::string described;
  int marked = 0;
  // Polled every half second (ringctl is a process; the four ranks share two cores).
  bool ended = false;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(300);
       !ended && absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(500))) {
    described = cluster->Ctl({"describe", "job", id}).output;
    if (std::regex_search(described, std::regex("straggler \\(\\d"))) {
      ++marked;
      std::cout << "straggler mark:\n" << described << std::endl;
    }
    ended = described.find("State:        SUCCEEDED") != std::string::npos ||
            described.find("State:        FAILED") != std::string::npos ||
            described.find("State:        CANCELLED") != std::string::npos;
  }
  ASSERT_TRUE(ended) << described;
  EXPECT_EQ(marked, 0);
  ASSERT_EQ(cluster->WaitForEnd(id, absl::Seconds(30)), "SUCCEEDED") << described;
  std::move(cancel).Cancel();

  // Every event (describe may leave old ones out; watch lists them all and exits 0 on SUCCEEDED).
  const CommandResult watched = cluster->Ctl({"watch", id});
  EXPECT_EQ(watched.exit_code, 0) << watched.output;
  const std::string& events = watched.output;
  EXPECT_EQ(Events(events, "slow_link"), 0) << events;
  EXPECT_EQ(Events(events, "link_recovered"), 0) << events;
  EXPECT_EQ(Events(events, "straggler"), 0) << events;
  EXPECT_EQ(Events(events, "hang"), 0) << events;
  // The start-up check says nothing when every link is fine, and the watch never thought a link
  // had dropped: no "link_check" event at all.
  EXPECT_EQ(Events(events, "link_check"), 0) << events;
  EXPECT_THAT(events, Not(HasSubstr("link check started by the coordinator")));
  EXPECT_THAT(events, Not(HasSubstr("RESTARTING")));
  EXPECT_THAT(events, HasSubstr("SUCCEEDED"));
  described = cluster->Ctl({"describe", "job", id}).output;
  // The start-up check ran and every rank reported: its silence is a verdict.
  EXPECT_THAT(described, HasSubstr("link check of generation 1, 4 of 4 ranks reported"))
      << described;
  EXPECT_THAT(described, HasSubstr("Restarts: 0 of 0")) << described;
  EXPECT_THAT(described, HasSubstr(absl::StrCat("step ", kSteps))) << described;
  const auto metrics =
      HttpGet("127.0.0.1", cluster->coordinator().metrics_port, "/metrics", absl::Seconds(10));
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(metrics->body, Not(HasSubstr("ringmaster_straggler{job_id=\"" + id + "\"")));
  EXPECT_THAT(metrics->body, Not(HasSubstr("ringmaster_slow_link{job_id=\"" + id + "\"")));
  if (HasFailure()) std::cout << described << std::endl;
}

}  // namespace
}  // namespace ringmaster::testing
