// The builtin trainer under a real coordinator and two real agents (CPU slots) on loopback:
// data parallelism over two Gloo processes (plain, ZeRO-1, ZeRO-2) follows the single-process
// run of the same global batch; the collective bench checks its data across four ranks on two
// nodes; the trainers' step reports reach the agents' /metrics with nccl-tests bandwidth; a
// trainer that cannot start, or a step whose gradients are not finite, fails the job with its
// reason in the job's events.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/http_client.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/promtool_check.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kModel[] =
    "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
    "  batch: {micro_batch: 4, global_batch: 16}\n"
    "  steps: 12\n"
    "  optimizer: {lr: 2.0e-3, warmup_steps: 2, weight_decay: 0.1, clip_grad_norm: 1.0}\n";

class TrainerClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = TestTempDir() + "/trainer_cluster";
    std::filesystem::remove_all(dir);
    auto cluster = TestCluster::Start(dir, {});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // Runs a job of `data` ranks on one node to the end; returns rank 0's losses. With `flags`, the
  // trainer runs as a command job with them.
  std::vector<std::pair<int, std::string>> RunDataParallel(const std::string& name, int data,
                                                           int zero, const std::string& flags = "") {
    const std::string program =
        flags.empty() ? "builtin: gpt"
                      : absl::StrCat("command: [\"", TestCluster::Runfile("trainer/trainer"),
                                     "\", \"", flags, "\"]");
    const std::string id = cluster_->Submit(
        name, absl::StrCat("name: ", name, "\nnodes: 1\ndevices_per_node: ", data,
                           "\nparallelism: {tensor: 1, pipeline: 1, data: ", data,
                           "}\ntrainer:\n  ", program, "\n  zero_stage: ", zero, "\n",
                           kModel));
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(120)), "SUCCEEDED")
        << cluster_->Ctl({"describe", "job", id}).output << cluster_->RankLog(id, 1, 0);
    const bool shm = cluster_->RankLog(id, 1, 0).find("collectives through shared memory") !=
                     std::string::npos;
    // A single rank has no peer to share memory with; otherwise shared memory is the default.
    EXPECT_EQ(shm, data > 1 && flags.find("--shared_memory=false") == std::string::npos) << name;
    return TrainerLosses(cluster_->RankLog(id, 1, 0));
  }

  static TestCluster* cluster_;
};

TestCluster* TrainerClusterTest::cluster_ = nullptr;

double Parse(const std::string& s) {
  double v = 0;
  EXPECT_TRUE(absl::SimpleAtod(s, &v)) << s;
  return v;
}

// Tolerance: the data-parallel runs sum the same per-sequence gradients in a different order
// (two half-batch sums instead of one), so losses agree to float rounding, amplified a little
// by 12 steps of AdamW: within 1e-4 relative.
void ExpectClose(const std::vector<std::pair<int, std::string>>& a,
                 const std::vector<std::pair<int, std::string>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), 12u) << what;
  ASSERT_EQ(b.size(), 12u) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const double x = Parse(a[i].second), y = Parse(b[i].second);
    EXPECT_NEAR(x, y, 1e-4 * std::abs(x)) << what << " step " << a[i].first;
  }
}

TEST_F(TrainerClusterTest, TwoProcessesMatchOneProcessWithTheSameGlobalBatch) {
  auto one = RunDataParallel("dp1", 1, 0);
  auto two = RunDataParallel("dp2", 2, 0);
  ExpectClose(one, two, "DP=2 vs DP=1");
  auto zero1 = RunDataParallel("zero1", 2, 1);
  ExpectClose(two, zero1, "ZeRO-1 vs plain DP");
  auto zero2 = RunDataParallel("zero2", 2, 2);
  ExpectClose(two, zero2, "ZeRO-2 vs plain DP");
  // The same over Gloo's TCP transport instead of the (default) shared-memory collectives.
  auto gloo = RunDataParallel("gloo", 2, 1, "--shared_memory=false");
  ExpectClose(two, gloo, "ZeRO-1 over Gloo vs plain DP over shared memory");
  // The loss went down over the 12 steps.
  EXPECT_LT(Parse(two.back().second), Parse(two.front().second) - 0.3);
}

// The trainer's own reason for failing (here: bf16 asked of a CPU slot, a fatal exit 78) reaches
// the job's events through the worker API, the agent and the coordinator: no log to open.
TEST_F(TrainerClusterTest, ATrainerThatCannotStartFailsTheJobSayingWhy) {
  const std::string id =
      cluster_->Submit("bf16", absl::StrCat("name: bf16\nnodes: 1\ndevices_per_node: 1\ntrainer:\n",
                                            "  builtin: gpt\n  precision: bf16\n", kModel));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(120)), "FAILED") << cluster_->RankLog(id, 1, 0);
  const std::string described = cluster_->Ctl({"describe", "job", id}).output;
  // Its reason as it announced it (not its last line of output, which says the same after
  // "trainer failed ...").
  EXPECT_THAT(described, HasSubstr("rank 0 on agent-0 exited with code 78: INVALID_ARGUMENT: "
                                   "trainer.precision: bf16 needs a GPU"));
  EXPECT_THAT(described, HasSubstr("the CPU trainer computes in fp32 (fatal: no restart)"));
}

// A step whose gradients are NaN (injected into rank 1's loss gradient; the data-parallel
// reduction carries it to rank 0 on the other node) fails the job without a restart, which
// would only repeat it, and says why in the job's events. No rank applied that update, so the
// newest checkpoint is the last good step's and nothing was written after it.
TEST_F(TrainerClusterTest, ANonFiniteStepFailsTheJobWithoutARestartSayingWhy) {
  const std::string checkpoints = TestTempDir() + "/trainer_cluster_nan";
  const std::string id = cluster_->Submit(
      "nan", absl::StrCat("name: nan\nnodes: 2\ndevices_per_node: 1\n",
                          "parallelism: {tensor: 1, pipeline: 1, data: 2}\ntrainer:\n",
                          "  command: [\"", TestCluster::Runfile("trainer/trainer"),
                          "\", \"--nan_gradients_at_step=5\", \"--nan_gradients_rank=1\"]\n",
                          kModel, "checkpoint: {dir: ", checkpoints,
                          ", every_steps: 2, keep: 2}\nrestart: {max_restarts: 2}\n"));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(120)), "FAILED") << cluster_->RankLog(id, 1, 0);
  const std::string described = cluster_->Ctl({"describe", "job", id}).output;
  EXPECT_TRUE(std::regex_search(
      described, std::regex("rank [01] on agent-[01] exited with code 78: OUT_OF_RANGE: step 5: "
                            "the gradient norm is nan \\(loss [0-9.]+\\): the update was not "
                            "applied, the parameters are those of step 4")))
      << described;
  EXPECT_THAT(described, HasSubstr("(fatal: no restart)"));
  // The other rank may have been stopped before it printed its own failure.
  ExpectNoRankFinishedTheNanStep(*cluster_, id, 2, 5);
  // Nothing after step 4 (step 4's own may still have been in writing when the agent stopped
  // its ranks).
  EXPECT_THAT(CheckpointDirs(checkpoints), Not(IsEmpty()));
  for (const std::string& dir : CheckpointDirs(checkpoints)) EXPECT_LE(dir, "step-00000004");
}

TEST_F(TrainerClusterTest, CollectiveBenchChecksItsDataAcrossTwoNodes) {
  const std::string id = cluster_->Submit(
      "bench", absl::StrCat("name: bench\nnodes: 2\ndevices_per_node: 2\n",
                            "parallelism: {tensor: 1, pipeline: 1, data: 4}\ntrainer:\n",
                            "  command: [\"", TestCluster::Runfile("trainer/trainer"),
                            "\", \"--mode=collective-bench\", \"--bench_max_bytes=262144\"]\n",
                            "  steps: 1\n"));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(120)), "SUCCEEDED")
      << cluster_->RankLog(id, 1, 0);
  const std::string log = cluster_->RankLog(id, 1, 0);
  EXPECT_THAT(log, HasSubstr("4 rank(s)"));
  EXPECT_THAT(log, HasSubstr("data check passed: 0 wrong elements"));
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"}) {
    EXPECT_THAT(log, HasSubstr(op));
  }
}

TEST_F(TrainerClusterTest, StepReportsReachTheAgentsMetricsWithBusBandwidth) {
  // A long run, read while it is live, then cancelled.
  std::string model = kModel;
  model.replace(model.find("steps: 12"), 9, "steps: 100000");
  const std::string id = cluster_->Submit(
      "metrics", absl::StrCat("name: metrics\nnodes: 2\ndevices_per_node: 1\n",
                              "parallelism: {tensor: 1, pipeline: 1, data: 2}\ntrainer:\n",
                              "  builtin: gpt\n", model));
  ASSERT_FALSE(id.empty());
  const std::string busbw = absl::StrCat("ringmaster_collective_busbw_bytes_per_second{job_id=\"",
                                         id, "\",rank=\"0\",op=\"all_reduce\",group=\"dp0\"}");
  const std::string step = absl::StrCat("ringmaster_step{job_id=\"", id, "\",rank=\"0\"}");
  std::string body;
  const bool seen = WaitFor(
      [&] {
        for (int i = 0; i < cluster_->agent_count(); ++i) {
          auto page = HttpGet("127.0.0.1", cluster_->AgentMetricsPort(i), "/metrics");
          if (page.ok() && page->body.find(busbw) != std::string::npos &&
              page->body.find(step) != std::string::npos) {
            body = page->body;
            return true;
          }
        }
        return false;
      },
      absl::Seconds(60));
  EXPECT_TRUE(seen) << body;
  // A positive bus bandwidth, as the trainer measured it.
  const size_t at = body.find(busbw);
  ASSERT_NE(at, std::string::npos);
  double value = 0;
  const size_t start = at + busbw.size() + 1;
  EXPECT_TRUE(absl::SimpleAtod(body.substr(start, body.find('\n', start) - start), &value));
  EXPECT_GT(value, 0);
  // The step's gradient norm, next to its loss.
  EXPECT_THAT(body,
              HasSubstr(absl::StrCat("ringmaster_grad_norm{job_id=\"", id, "\",rank=\"0\"} ")));
  ExpectPromtoolClean(body);
  EXPECT_EQ(cluster_->Ctl({"cancel", id}).exit_code, 0);
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(60)), "CANCELLED");
}

}  // namespace
}  // namespace ringmaster::testing
