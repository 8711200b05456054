// The trainer binary on a GPU (one process, no agent; CUDA_VISIBLE_DEVICES=0 names the GPU, as the
// agent does): it trains on the CUDA device with NCCL groups, learns, and a run resumed from a
// checkpoint written from device memory (bf16 working weights, fp32 masters, AdamW moments,
// ZeRO-sharded state) continues the uninterrupted run's trajectory exactly, losses and final
// parameters bit for bit; a step with NaN gradients is fatal before its update. In bf16 with
// materialised attention (`attention: materialized`) and with the default, fused, and in fp32,
// where the default is materialised. Skipped without a GPU. Under --config=emu the trainer binary
// itself is built emulated (testing/cuda_emu), so this runs on the CPU: the trainer's whole GPU
// wiring (accelerator, communicators, checkpoints), not only the device's kernels. It needs Bazel's
// runfiles, so the GPU machines' archive (bench/gpu_bundle) does not carry it: there bench/gpu_job
// runs the trainer binary on the GPU instead.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/cuda_device_count.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 20;

struct Case {
  const char* precision;
  int zero;
  const char* attention;  // "" for unset
  int heads;              // of d_model 64: 2 heads of 32 channels take the fused kernels
  const char* runs;       // the attention the trainer reports
};

class TrainerGpuTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const absl::StatusOr<int> gpus = CudaDeviceCount();
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    if (*gpus == 0) GTEST_SKIP() << "no CUDA device visible";
    // The child processes inherit it (this test starts no threads of its own).
    setenv("CUDA_VISIBLE_DEVICES", "0", /*overwrite=*/1);
    dir_ = FreshTestCaseDir();
  }
  std::string Spec(const std::string& checkpoints) {
    const std::string path = dir_ + "/" + checkpoints + ".yaml";
    std::ofstream(path) << "name: t\ntrainer:\n  builtin: gpt\n"
                        << "  model: {layers: 2, d_model: 64, heads: " << GetParam().heads
                        << ", seq_len: 32, vocab: 128}\n"
                        << "  batch: {micro_batch: 4, global_batch: 8}\n"
                        << "  steps: " << kSteps << "\n"
                        << "  optimizer: {lr: 2.0e-3, warmup_steps: 4, weight_decay: 0.1, "
                           "clip_grad_norm: 1.0}\n"
                        << "  precision: " << GetParam().precision << "\n"
                        << "  zero_stage: " << GetParam().zero << "\n"
                        << (*GetParam().attention != '\0'
                                ? absl::StrCat("  attention: ", GetParam().attention, "\n")
                                : "")
                        << "checkpoint: {dir: " << dir_ << "/" << checkpoints
                        << ", every_steps: 5, keep: 2}\n";
    return path;
  }
  // The case's uninterrupted run, trained once per test program and shared by its two tests:
  // the run is deterministic (what the first test checks), and running it again for the second
  // took a quarter of this test's time. A failed run is not kept.
  CommandResult Straight() {
    static auto* runs = new std::map<std::string, CommandResult>;
    const Case& c = GetParam();
    const std::string key = absl::StrCat(c.precision, "/", c.zero, "/", c.attention, "/", c.heads);
    if (auto it = runs->find(key); it != runs->end()) return it->second;
    CommandResult straight = TrainOrFail({"--spec=" + Spec("straight")});
    if (straight.exit_code == 0 && !HasFailure()) (*runs)[key] = straight;
    return straight;
  }
  std::string dir_;
};

TEST_P(TrainerGpuTest, LearnsAndAResumedRunContinuesTheSameTrajectoryExactly) {
  CommandResult straight = Straight();
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  // The CUDA accelerator's description (the CPU device has no MFU peak line of this form).
  EXPECT_THAT(straight.output, HasSubstr("training on "));
  EXPECT_THAT(straight.output, HasSubstr("; MFU against "));
  EXPECT_THAT(straight.output, HasSubstr(absl::StrCat("; attention ", GetParam().runs)));

  const std::string resumed_spec = Spec("resumed");
  CommandResult first = TrainOrFail({"--spec=" + resumed_spec, "--exit_after_step=10"});
  EXPECT_EQ(first.exit_code, 75) << first.output;  // retryable
  CommandResult second = TrainOrFail({"--spec=" + resumed_spec});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr("resumed from the checkpoint at step 10"));

  auto a = TrainerLosses(straight.output);
  auto b = TrainerLosses(first.output);
  auto c = TrainerLosses(second.output);
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps)) << straight.output;
  ASSERT_EQ(b.size(), 10u) << first.output;
  ASSERT_EQ(c.size(), 10u) << second.output;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(b[i], a[i]);       // the same first 10 steps
    EXPECT_EQ(c[i], a[10 + i]);  // and after the resume, the same last 10
  }
  EXPECT_EQ(TrainerFinalCrc(second.output), TrainerFinalCrc(straight.output));
  EXPECT_FALSE(TrainerFinalCrc(straight.output).empty());
  // From about ln(128) = 4.85 to well below it.
  EXPECT_GT(TrainerLossValue(a.front().second), 4.5);
  EXPECT_LT(TrainerLossValue(a.back().second), TrainerLossValue(a.front().second) - 1.0)
      << straight.output;
}

// NaN gradients (injected into the loss gradient of step 7) pass through the device's kernels
// and reductions to the norm: the run ends with the fatal exit 78 before that update, the newest
// checkpoint is step 5's, and a run resumed from it without the fault ends with the parameters of
// the uninterrupted run.
TEST_P(TrainerGpuTest, ANonFiniteStepIsFatalBeforeItsUpdate) {
  CommandResult straight = Straight();
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string spec = Spec("nan");
  CommandResult failed = TrainOrFail({"--spec=" + spec, "--nan_gradients_at_step=7"});
  EXPECT_EQ(failed.exit_code, 78) << failed.output;
  EXPECT_THAT(failed.output, HasSubstr("step 7: the gradient norm is nan"));
  EXPECT_EQ(TrainerLosses(failed.output).size(), 6u) << failed.output;
  EXPECT_EQ(CheckpointDirs(dir_ + "/nan"), std::vector<std::string>{"step-00000005"});
  CommandResult resumed = TrainOrFail({"--spec=" + spec});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed from the checkpoint at step 5"));
  auto losses = TrainerLosses(resumed.output);
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps - 5)) << resumed.output;
  EXPECT_TRUE(std::isfinite(TrainerLossValue(losses.back().second))) << resumed.output;
  EXPECT_EQ(TrainerFinalCrc(resumed.output), TrainerFinalCrc(straight.output));
  EXPECT_FALSE(TrainerFinalCrc(straight.output).empty());
}

INSTANTIATE_TEST_SUITE_P(Precisions, TrainerGpuTest,
                         // Unset, attention is fused where the kernels take the job (bf16,
                         // heads of 32 channels) and materialised where they do not (fp32).
                         ::testing::Values(Case{"bf16", 0, "materialized", 2, "materialized"},
                                           Case{"fp32", 3, "", 2, "materialized"},
                                           Case{"bf16", 1, "", 2, "fused"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.precision, "_zero", info.param.zero, "_",
                                               info.param.runs);
                         });

}  // namespace
}  // namespace ringmaster::testing
