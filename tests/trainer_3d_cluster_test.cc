// The builtin trainer in a tensor x pipeline x data-parallel layout under a real coordinator and
// two real agents (4 CPU slots each, 8 trainer processes over Gloo):
//  - TP=2 x PP=2 x DP=2 (m = 4 microbatches per replica) follows the single-process run of the
//    same seed, data and global batch for 20 steps, and every rank prints the same losses;
//  - the step lines carry every stage's compute time, the imbalance and the measured bubble
//    next to the 1F1B formula;
//  - a run interrupted after step 10 (generation 1 fails, the coordinator restarts the job, and
//    generation 2 resumes every rank from the step-10 checkpoint) repeats the uninterrupted run of
//    the same layout exactly: the same losses, and the same parameters on every rank.
// Both with plain data parallelism (the model state in data-parallel rank 0's files) and with
// ZeRO-3 (every rank's own shard).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 20;
constexpr int kRanks = 8;

// Tolerance against the single process: 1e-5 relative per step. The 3D run adds the same terms
// in another order (tensor-parallel partial sums, two replicas' gradients, the tied embedding's
// two halves), which float rounding separates by ~1e-7 over 20 steps (the thread tests in
// trainer/parallel/parallel_trainer_test.cc print their differences); a lost or doubled gradient
// is off by 1e-3 or more.
constexpr double kTolerance = 1e-5;

std::string Trainer(int generation_exit_step, const std::string& dir, int zero) {
  std::string program = "  builtin: gpt\n";
  if (generation_exit_step > 0) {
    program = absl::StrCat("  command: [\"", TestCluster::Runfile("trainer/trainer"),
                           "\", \"--exit_after_step=", generation_exit_step,
                           "\", \"--exit_in_generation=1\"]\n");
  }
  return absl::StrCat(
      "trainer:\n", program, "  zero_stage: ", zero, "\n",
      "  model: {layers: 4, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n",
      "  batch: {micro_batch: 2, global_batch: 16}\n", "  steps: ", kSteps, "\n",
      "  optimizer: {lr: 2.0e-3, warmup_steps: 2, weight_decay: 0.1, clip_grad_norm: 1.0}\n",
      dir.empty() ? "" : absl::StrCat("checkpoint: {dir: ", dir, ", every_steps: 5, keep: 2}\n"));
}

class Trainer3dClusterTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TestTempDir() + "/trainer_3d_cluster");
    std::filesystem::remove_all(*dir_);
    TestClusterOptions options;
    options.agents = 2;
    options.slots = 4;
    auto cluster = TestCluster::Start(*dir_, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // Submits a TP=2 x PP=2 x DP=2 job and waits for it to succeed; returns its id.
  std::string Run3d(const std::string& name, const std::string& trainer) {
    const std::string id =
        cluster_->Submit(name, absl::StrCat("name: ", name, "\nnodes: 2\ndevices_per_node: 4\n",
                                            "parallelism: {tensor: 2, pipeline: 2, data: 2}\n",
                                            "restart: {max_restarts: 1}\n", trainer));
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(300)), "SUCCEEDED")
        << cluster_->Ctl({"describe", "job", id}).output << cluster_->RankLog(id, 1, 0)
        << cluster_->RankLog(id, 2, 0);
    return id;
  }

  // The uninterrupted 3D run with ZeRO stage `zero`, shared by the tests.
  const std::string& Straight(int zero) {
    static auto* ids = new std::map<int, std::string>();
    if (!ids->count(zero)) {
      const std::string name = absl::StrCat("straight", zero);
      (*ids)[zero] = Run3d(name, Trainer(0, absl::StrCat(*dir_, "/ckpt-", name), zero));
    }
    return ids->at(zero);
  }

  static TestCluster* cluster_;
  static std::string* dir_;
};

TestCluster* Trainer3dClusterTest::cluster_ = nullptr;
std::string* Trainer3dClusterTest::dir_ = nullptr;

TEST_P(Trainer3dClusterTest, ThreeDimensionalJobMatchesOneProcess) {
  const int zero = GetParam();
  // The single process: the whole global batch of 16 as 8 microbatches of 2.
  const std::string spec = *dir_ + "/single.yaml";
  std::ofstream(spec) << "name: single\n" << Trainer(0, "", zero);
  auto single = RunCommand({"trainer/trainer", "--blas_threads=1", "--spec=" + spec}, "");
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_EQ(single->exit_code, 0) << single->output;
  const auto want = TrainerLosses(single->output);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps)) << single->output;

  const std::string& id = Straight(zero);
  const auto got = TrainerLosses(cluster_->RankLog(id, 1, 0));
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps)) << cluster_->RankLog(id, 1, 0);
  const double worst = [&] {  // ExpectLossesFollow's failures name its own lines
    SCOPED_TRACE("TP=2 x PP=2 x DP=2 vs one process");
    return ExpectLossesFollow(got, want, kTolerance);
  }();
  std::printf(
      "TP=2 x PP=2 x DP=2 ZeRO-%d vs one process: loss %s -> %s, largest relative difference "
      "%.2e\n",
      zero, want.front().second.c_str(), want.back().second.c_str(), worst);
  EXPECT_LT(TrainerLossValue(got.back().second),
            TrainerLossValue(got.front().second) - 0.5);  // it learns
  // Every rank, on every stage, prints the step's loss (the last stage's, broadcast).
  for (int rank = 1; rank < kRanks; ++rank) {
    EXPECT_EQ(TrainerLosses(cluster_->RankLog(id, 1, rank)), got) << "rank " << rank;
  }
  // Stage timings, imbalance and the bubble next to (p-1)/(m+p-1) = 1/5.
  const std::string log = cluster_->RankLog(id, 1, 0);
  EXPECT_THAT(log, ::testing::ContainsRegex(
                       "step 20/20 loss \\S+ .* stage_ms [0-9.]+,[0-9.]+ imbalance [0-9.]+% "
                       "bubble [0-9.]+ \\(formula 0.200\\)"));
  EXPECT_THAT(log, HasSubstr(absl::StrCat("(tp 0/2, pp 0/2, dp 0/2, zero ", zero, ")")));
  EXPECT_THAT(log, HasSubstr("this shard: layers [0, 2) + embeddings"));
  EXPECT_THAT(cluster_->RankLog(id, 1, 7), HasSubstr("this shard: layers [2, 4) + head"));
}

TEST_P(Trainer3dClusterTest, ResumeUnderThreeDimensionsEqualsAnUninterruptedRun) {
  const int zero = GetParam();
  const std::string& straight = Straight(zero);
  const std::string name = absl::StrCat("resumed", zero);
  const std::string id = Run3d(name, Trainer(10, absl::StrCat(*dir_, "/ckpt-", name), zero));
  const std::string first = cluster_->RankLog(id, 1, 0);
  const std::string second = cluster_->RankLog(id, 2, 0);
  // Every rank fails after step 10; the first to exit prints why, and the agents may stop the
  // others before they print it.
  bool reported = false;
  for (int rank = 0; rank < kRanks; ++rank) {
    reported = reported || absl::StrContains(cluster_->RankLog(id, 1, rank),
                                             "injected failure after step 10");
  }
  EXPECT_TRUE(reported) << first;
  EXPECT_THAT(second, HasSubstr("resumed from the checkpoint at step 10"));
  const auto a = TrainerLosses(cluster_->RankLog(straight, 1, 0));
  const auto b = TrainerLosses(first);
  const auto c = TrainerLosses(second);
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(b.size(), 10u) << first;
  ASSERT_EQ(c.size(), 10u) << second;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(b[i], a[i]);       // the same first 10 steps
    EXPECT_EQ(c[i], a[10 + i]);  // and after the resume, exactly the same last 10
  }
  // Every rank ends with the same parameters as in the uninterrupted run.
  for (int rank = 0; rank < kRanks; ++rank) {
    const std::string want = TrainerFinalCrc(cluster_->RankLog(straight, 1, rank));
    EXPECT_FALSE(want.empty()) << "rank " << rank;
    EXPECT_EQ(TrainerFinalCrc(cluster_->RankLog(id, 2, rank)), want) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, Trainer3dClusterTest, ::testing::Values(0, 3));

}  // namespace
}  // namespace ringmaster::testing
