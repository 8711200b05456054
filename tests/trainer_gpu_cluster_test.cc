// The builtin trainer on four GPUs of one node, under a real coordinator and agent: TP=2 x DP=2,
// four trainer processes, each seeing its own GPU (CUDA_VISIBLE_DEVICES, from the agent), their
// tensor- and data-parallel groups NCCL communicators whose unique ids travel through the
// coordinator's rendezvous store.
//  - The run follows one GPU's run of the same seed, data and global batch (fp32: the same terms
//    summed in another order), and every rank prints the same losses.
//  - A rank SIGKILLed after a checkpoint (the coordinator frozen meanwhile): every other rank
//    sees its NCCL groups fail (the lost rank's, or a group of a rank that left after it), aborts
//    them and exits 75 (retryable) by itself; the coordinator, thawed, restarts the job (new
//    communicators, new ids), every rank resumes from the last complete checkpoint, and the run
//    repeats the uninterrupted one exactly: the same losses, the same parameters on every rank.
//  - A rank stopped (SIGSTOP) after a checkpoint: its peers wait in their NCCL operations, alive;
//    the watchdog reports a hang naming the stopped rank, the restart stops every worker (the
//    stopped one too), and the job repeats the uninterrupted run exactly.
//  - NaN gradients on one rank fail the job in that step, before its update (exit 78, no
//    restart).
// Skipped with fewer than four GPUs. Under --config=emu the agent and the trainer are built
// emulated (testing/cuda_emu): four emulated GPUs, the ranks' NCCL across processes.
#include <cuda_runtime_api.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_device_count.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRanks = 4;

// The steps of every run: 30 on GPUs, 20 emulated (--config=emu: device 0 is testing/cuda_emu's,
// by its name), where each step of four ranks takes the CPU seconds. 20 keep every claim: a
// checkpoint at step 10 with 10 steps after it in which to kill or stop a rank and which the
// resumed run must repeat exactly, and a loss that falls by more than 0.5 (by more than 1.0 in
// 20 steps in trainer_gpu_test, the same model and optimizer).
int Steps() {
  static const int steps = [] {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return 30;
    }
    return std::strncmp(prop.name, "Emulated GPU", 12) == 0 ? 20 : 30;
  }();
  return steps;
}

// Against one GPU, relative per step: the emulated layouts of
// trainer/cuda/cuda_parallel_trainer_test agree within 1e-7; a lost or doubled gradient is off
// by 1e-3 or more.
constexpr double kTolerance = 1e-5;

std::string Trainer(const std::string& checkpoints) {
  return absl::StrCat(
      "trainer:\n  builtin: gpt\n  precision: fp32\n  zero_stage: 1\n",
      "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n",
      "  batch: {micro_batch: 2, global_batch: 8}\n", "  steps: ", Steps(), "\n",
      "  optimizer: {lr: 2.0e-3, warmup_steps: 4, weight_decay: 0.1, clip_grad_norm: 1.0}\n",
      checkpoints.empty()
          ? ""
          : absl::StrCat("checkpoint: {dir: ", checkpoints, ", every_steps: 5, keep: 2}\n"));
}

// The step a rank resumed from ("resumed from the checkpoint at step N"), or 0.
int ResumedStep(const std::string& log) {
  std::smatch m;
  int step = 0;
  if (std::regex_search(log, m, std::regex("resumed from the checkpoint at step (\\d+)"))) {
    (void)absl::SimpleAtoi(m[1].str(), &step);  // the regex guarantees digits
  }
  return step;
}

class TrainerGpuClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const absl::StatusOr<int> gpus = CudaDeviceCount();
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    if (*gpus < kRanks) {
      skip_ =
          new std::string(absl::StrCat(*gpus, " CUDA devices visible, the test needs ", kRanks));
      return;
    }
    dir_ = new std::string(TestTempDir() + "/trainer_gpu_cluster");
    std::filesystem::remove_all(*dir_);
    TestClusterOptions options;
    options.agents = 1;
    options.devices = "gpu";
    // A test freezes the coordinator until the survivors of a killed rank exit by themselves (far
    // less than the 300 s this allows): the agent keeps its stream through that.
    options.agent_flags = {"--coordinator_timeout=600"};
    auto cluster = TestCluster::Start(*dir_, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (skip_ != nullptr) GTEST_SKIP() << *skip_;
    ASSERT_NE(cluster_, nullptr);
  }

  // Submits the TP=2 x DP=2 job; returns its id.
  static std::string Submit(const std::string& name) {
    return cluster_->Submit(
        name,
        absl::StrCat("name: ", name, "\nnodes: 1\ndevices_per_node: ", kRanks, "\n",
                     "parallelism: {tensor: 2, pipeline: 1, data: 2}\n",
                     "restart: {max_restarts: 1}\n", Trainer(absl::StrCat(*dir_, "/ckpt-", name))));
  }
  static void ExpectSucceeded(const std::string& id) {
    EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(600)), "SUCCEEDED")
        << cluster_->Ctl({"describe", "job", id}).output << cluster_->RankLog(id, 1, 0)
        << cluster_->RankLog(id, 2, 0);
  }

  static void WaitForCheckpointAtStep10(const std::string& id) {
    ASSERT_TRUE(WaitFor(
        [&] {
          return cluster_->RankLog(id, 1, 0).find("checkpoint at step 10 committed") !=
                 std::string::npos;
        },
        absl::Seconds(300)))
        << cluster_->RankLog(id, 1, 0);
  }
  // Every rank of job `id`'s second generation resumed from a checkpoint at step 10 or later
  // and repeated the uninterrupted run `straight` from there: the same losses, the same
  // parameters.
  static void ExpectGenerationTwoRepeats(const std::string& id, const std::string& straight) {
    for (int rank = 0; rank < kRanks; ++rank) {
      const std::string log = cluster_->RankLog(id, 2, rank);
      const std::string want_log = cluster_->RankLog(straight, 1, rank);
      const int resumed = ResumedStep(log);
      EXPECT_GE(resumed, 10) << log;
      const auto want = TrainerLosses(want_log);
      const auto got = TrainerLosses(log);
      ASSERT_EQ(want.size(), static_cast<size_t>(Steps())) << want_log;
      ASSERT_EQ(got.size(), static_cast<size_t>(Steps() - resumed)) << log;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], want[resumed + i]) << "rank " << rank;
      }
      EXPECT_EQ(TrainerFinalCrc(log), TrainerFinalCrc(want_log)) << "rank " << rank;
      EXPECT_FALSE(TrainerFinalCrc(log).empty()) << log;
    }
  }

  // The uninterrupted run, shared by the tests.
  static const std::string& Straight() {
    static auto* id = new std::string;
    if (id->empty()) {
      *id = Submit("straight");
      ExpectSucceeded(*id);
    }
    return *id;
  }

  static TestCluster* cluster_;
  static std::string* dir_;
  static std::string* skip_;
};

TestCluster* TrainerGpuClusterTest::cluster_ = nullptr;
std::string* TrainerGpuClusterTest::dir_ = nullptr;
std::string* TrainerGpuClusterTest::skip_ = nullptr;

TEST_F(TrainerGpuClusterTest, TensorAndDataParallelRanksFollowOneGpu) {
  // One GPU: the whole global batch of 8 as 4 microbatches of 2.
  const std::string spec = *dir_ + "/single.yaml";
  std::ofstream(spec) << "name: single\n" << Trainer("");
  auto single = RunCommand(
      {"env", "CUDA_VISIBLE_DEVICES=0", "trainer/trainer", "--blas_threads=1", "--spec=" + spec},
      "");
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_EQ(single->exit_code, 0) << single->output;
  const auto want = TrainerLosses(single->output);
  ASSERT_EQ(want.size(), static_cast<size_t>(Steps())) << single->output;

  const std::string& id = Straight();
  const std::string log = cluster_->RankLog(id, 1, 0);
  const auto got = TrainerLosses(log);
  ASSERT_EQ(got.size(), static_cast<size_t>(Steps())) << log;
  const double worst = [&] {  // ExpectLossesFollow's failures name its own lines
    SCOPED_TRACE("TP=2 x DP=2 on 4 GPUs vs 1 GPU");
    return ExpectLossesFollow(got, want, kTolerance);
  }();
  std::printf("TP=2 x DP=2 on 4 GPUs vs 1 GPU: loss %s -> %s, largest relative difference %.2e\n",
              want.front().second.c_str(), want.back().second.c_str(), worst);
  EXPECT_LT(TrainerLossValue(got.back().second), TrainerLossValue(got.front().second) - 0.5);
  EXPECT_THAT(log, HasSubstr("training on "));
  EXPECT_THAT(log, HasSubstr("(tp 0/2, pp 0/1, dp 0/2, zero 1)"));
  for (int rank = 1; rank < kRanks; ++rank) {
    EXPECT_EQ(TrainerLosses(cluster_->RankLog(id, 1, rank)), got) << "rank " << rank;
  }
}

TEST_F(TrainerGpuClusterTest, ARankKilledAfterACheckpointResumesAndRepeatsTheRunExactly) {
  const std::string& straight = Straight();
  const std::string id = Submit("killed");
  ASSERT_FALSE(id.empty());
  WaitForCheckpointAtStep10(id);
  const pid_t victim = TrainerPid(cluster_->RankLog(id, 1, 1));
  ASSERT_GT(victim, 0);
  // With the coordinator frozen, nothing stops the survivors: each must see for itself that a
  // peer is lost (its NCCL groups' ncclRemoteError, or a lost peer's group's) and exit 75.
  cluster_->coordinator().process.Signal(SIGSTOP);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  for (int rank : {0, 2, 3}) {
    const std::string exited =
        absl::StrCat("rank ", rank, " of ", id, " (pid ",
                     TrainerPid(cluster_->RankLog(id, 1, rank)), ") exited: code 75");
    EXPECT_TRUE(WaitFor([&] { return cluster_->agent(0).Log().find(exited) != std::string::npos; },
                        absl::Seconds(120)))
        << cluster_->RankLog(id, 1, rank);
    const std::string log = cluster_->RankLog(id, 1, rank);
    std::smatch m;
    EXPECT_TRUE(
        std::regex_search(log, m, std::regex("trainer failed \\(exit 75, retryable\\)[^\n]*")))
        << log;
    // An NCCL group's failure (ncclRemoteError's text), not the Gloo world group's.
    EXPECT_THAT(m.empty() ? "" : m[0].str(),
                HasSubstr("remote process exited or there was a network error"));
    std::printf("generation 1 rank %d: %s\n", rank, m.empty() ? "?" : m[0].str().c_str());
  }
  cluster_->coordinator().process.Signal(SIGCONT);
  ExpectSucceeded(id);
  ExpectGenerationTwoRepeats(id, straight);
}

TEST_F(TrainerGpuClusterTest, AStoppedRankIsAHangThatNamesItAndTheRunRepeatsExactly) {
  const std::string& straight = Straight();
  const std::string id = Submit("stopped");
  ASSERT_FALSE(id.empty());
  WaitForCheckpointAtStep10(id);
  const pid_t victim = TrainerPid(cluster_->RankLog(id, 1, 1));
  ASSERT_GT(victim, 0);
  // Its peers wait in their NCCL operations, alive and reporting; only the watchdog can tell.
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  ExpectSucceeded(id);
  const std::string json = cluster_->Ctl({"get", "job", id, "-o", "json"}).output;
  EXPECT_EQ(HangBlamedRank(json), 1) << json;
  const std::string described = cluster_->Ctl({"describe", "job", id}).output;
  // Blamed on the evidence that rank 1 alone went silent (not on its place in a collective).
  std::smatch event;
  ASSERT_TRUE(std::regex_search(described, event, std::regex("[^\n]*  hang  [^\n]*"))) << described;
  std::printf("%s\n", event[0].str().c_str());
  EXPECT_THAT(event[0].str(), HasSubstr("rank 1's process stopped reporting"));
  // What rank 1 was doing, as its agent stopped it: its last line before the stop.
  ASSERT_NO_FATAL_FAILURE(ExpectLastOutputBeforeTheStopFromItsLog(*cluster_, id, 1, 1));
  // The restart stopped every worker of generation 1, the stopped one included (SIGCONT and
  // SIGTERM, then SIGKILL): none is left behind, frozen.
  EXPECT_TRUE(WaitFor([&] { return kill(victim, 0) != 0; }, absl::Seconds(60)));
  ExpectGenerationTwoRepeats(id, straight);
}

// NaN gradients on rank 3 (TP rank 1 of the second data-parallel replica) reach the other ranks
// through the NCCL groups (the TP all-reduces of its backward pass, the ZeRO-1 reduce-scatter,
// the norm's sums): the first rank to fail says why (exit 78, "step 7: the gradient norm is
// nan"), the job fails without a restart, and the agent stops the others, which may not have
// printed their own failure yet; a rank that did failed the same way. No rank finished step 7,
// and the newest checkpoint is the last good one. (trainer/parallel's NonFiniteStepTest shows
// in one process that every rank fails in that step.)
TEST_F(TrainerGpuClusterTest, NanGradientsOnOneRankFailTheJobBeforeTheUpdate) {
  std::string trainer = Trainer(absl::StrCat(*dir_, "/ckpt-nan"));
  const std::string builtin = "builtin: gpt";
  trainer.replace(trainer.find(builtin), builtin.size(),
                  absl::StrCat("command: [\"", TestCluster::Runfile("trainer/trainer"),
                               "\", \"--nan_gradients_at_step=7\", \"--nan_gradients_rank=3\"]"));
  const std::string id =
      cluster_->Submit("nan", absl::StrCat("name: nan\nnodes: 1\ndevices_per_node: ", kRanks, "\n",
                                           "parallelism: {tensor: 2, pipeline: 1, data: 2}\n",
                                           "restart: {max_restarts: 1}\n", trainer));
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(600)), "FAILED") << cluster_->RankLog(id, 1, 0);
  const std::string described = cluster_->Ctl({"describe", "job", id}).output;
  EXPECT_TRUE(std::regex_search(
      described, std::regex("FAILED: rank \\d on agent-0 exited with code 78: OUT_OF_RANGE: "
                            "step 7: the gradient norm is nan \\(loss [0-9.]+\\): the update "
                            "was not applied[^\n]*\\(fatal: no restart\\)")))
      << described;
  ExpectNoRankFinishedTheNanStep(*cluster_, id, kRanks, 7);
  // Nothing after step 5 (its own may still have been in writing when the agent stopped the
  // ranks).
  const std::vector<std::string> checkpoints = CheckpointDirs(absl::StrCat(*dir_, "/ckpt-nan"));
  EXPECT_THAT(checkpoints, ::testing::Not(::testing::IsEmpty()));
  for (const std::string& dir : checkpoints) EXPECT_LE(dir, "step-00000005");
}

}  // namespace
}  // namespace ringmaster::testing
