// The trainer binary run standalone (one process, no agent): it learns, a resumed run continues
// exactly the same trajectory (also after a SIGUSR1 stop request), a step whose gradients are
// not finite is fatal before its update, and configuration errors are fatal exit codes naming
// the field.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = FreshTestCaseDir(); }
  // A job file for a small model on the built-in corpus.
  std::string Spec(const std::string& extra, int steps = 40, int vocab = 128) {
    const std::string path = dir_ + "/job" + std::to_string(specs_++) + ".yaml";
    std::ofstream(path) << "name: t\ntrainer:\n  builtin: gpt\n"
                        << "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: "
                        << vocab << "}\n"
                        << "  batch: {micro_batch: 4, global_batch: 8}\n"
                        << "  steps: " << steps << "\n"
                        << "  optimizer: {lr: 2.0e-3, warmup_steps: 4, weight_decay: 0.1, "
                           "clip_grad_norm: 1.0}\n"
                        << extra;
    return path;
  }
  std::string dir_;
  int specs_ = 0;
};

TEST_F(TrainerTest, TwoLayerModelLossFallsClearlyOnTheBuiltinCorpus) {
  CommandResult r = TrainOrFail({"--spec=" + Spec("", 80)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto losses = TrainerLosses(r.output);
  ASSERT_EQ(losses.size(), 80u) << r.output;
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += TrainerLossValue(losses[i].second) / 5;
    last += TrainerLossValue(losses[75 + i].second) / 5;
  }
  // From about ln(128) = 4.85 (uniform over bytes) to well below it.
  EXPECT_GT(first, 4.0);
  EXPECT_LT(last, first - 1.5) << r.output;
}

class TrainerResumeTest : public TrainerTest, public ::testing::WithParamInterface<int> {};

TEST_P(TrainerResumeTest, ResumedRunContinuesTheSameTrajectoryExactly) {
  const std::string zero = "  zero_stage: " + std::to_string(GetParam()) + "\n";
  const std::string straight_spec =
      Spec(zero + "checkpoint: {dir: " + dir_ + "/straight, every_steps: 10, keep: 2}\n");
  CommandResult straight = TrainOrFail({"--spec=" + straight_spec});
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  const std::string resumed_spec =
      Spec(zero + "checkpoint: {dir: " + dir_ + "/resumed, every_steps: 10, keep: 2}\n");
  CommandResult first = TrainOrFail({"--spec=" + resumed_spec, "--exit_after_step=20"});
  EXPECT_EQ(first.exit_code, 75) << first.output;  // retryable
  EXPECT_THAT(first.output, HasSubstr("injected failure after step 20"));
  CommandResult second = TrainOrFail({"--spec=" + resumed_spec});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr("resumed from the checkpoint at step 20"));

  auto a = TrainerLosses(straight.output);
  auto b = TrainerLosses(first.output);
  auto c = TrainerLosses(second.output);
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 20u);
  ASSERT_EQ(c.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(b[i], a[i]);       // the same first 20 steps
    EXPECT_EQ(c[i], a[20 + i]);  // and after the resume, the same last 20
  }
  EXPECT_EQ(TrainerFinalCrc(second.output), TrainerFinalCrc(straight.output));
  EXPECT_FALSE(TrainerFinalCrc(straight.output).empty());
  // keep: 2 leaves the two newest checkpoints.
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/resumed/step-00000040/MANIFEST"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/resumed/step-00000030/MANIFEST"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/resumed/step-00000020"));
}

// Plain DP, ZeRO-2 (sharded gradients through the model's sink) and ZeRO-3 (parameters through
// its source) on one rank.
INSTANTIATE_TEST_SUITE_P(ZeroStages, TrainerResumeTest, ::testing::Values(0, 2, 3));

// Generation 1 of job j trains and checkpoints; then generation 2 claims the directory (as a
// replacement launched elsewhere would when it resumes): generation 1 stops (retryable exit)
// at its next checkpoint, saying why, having committed at most the one checkpoint whose last
// check came before the claim.
TEST_F(TrainerTest, AGenerationWhoseDirectoryANewerOneClaimedStops) {
  const std::string checkpoints = dir_ + "/fenced";
  const std::string spec =
      Spec("checkpoint: {dir: " + checkpoints + ", every_steps: 5, keep: 1000}\n", 1000000);
  const std::string log = dir_ + "/fenced.log";
  auto run = Subprocess::Start({"env", "RINGMASTER_JOB=j", "RINGMASTER_GENERATION=1",
                                "trainer/trainer", "--blas_threads=1", "--spec=" + spec},
                               log);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(WaitFor(
      [&] { return run->Log().find("checkpoint at step 5 committed") != std::string::npos; },
      absl::Seconds(120)))
      << run->Log();
  auto committed = [&] {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) {
      n += std::filesystem::exists(entry.path() / "MANIFEST") ? 1 : 0;
    }
    return n;
  };
  const int before = committed();
  std::ofstream(checkpoints + "/OWNER.tmp")
      << "ringmaster-checkpoint-owner 1\njob j\ngeneration 2\n";
  std::filesystem::rename(checkpoints + "/OWNER.tmp", checkpoints + "/OWNER");
  absl::StatusOr<int> status = run->Wait(absl::Seconds(120));
  ASSERT_TRUE(status.ok()) << run->Log();
  ASSERT_TRUE(WIFEXITED(*status)) << run->Log();
  EXPECT_EQ(WEXITSTATUS(*status), 75) << run->Log();
  EXPECT_THAT(run->Log(), HasSubstr("generation 1 of job j is stale: generation 2 has claimed"));
  EXPECT_LE(committed(), before + 1);
}

TEST_F(TrainerTest, Sigusr1StopsAfterACheckpointAndTheResumeLosesNothing) {
  // Far more steps than the test runs (the LR schedule follows `steps`, so every run shares it)
  // and no periodic checkpoint in reach: the only checkpoint is the one the request makes.
  const std::string spec =
      Spec("checkpoint: {dir: " + dir_ + "/stopped, every_steps: 100000, keep: 2}\n", 1000000);
  const std::string log = dir_ + "/stopped.log";
  auto run = Subprocess::Start({"trainer/trainer", "--blas_threads=1", "--spec=" + spec}, log);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(WaitFor([&] { return TrainerLosses(run->Log()).size() >= 3; }, absl::Seconds(120)))
      << run->Log();
  run->Signal(SIGUSR1);
  absl::StatusOr<int> status = run->Wait(absl::Seconds(120));
  ASSERT_TRUE(status.ok()) << run->Log();
  ASSERT_TRUE(WIFEXITED(*status)) << run->Log();
  EXPECT_EQ(WEXITSTATUS(*status), 75) << run->Log();  // retryable: the job goes on
  const std::string stopped = run->Log();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      stopped, m,
      std::regex("stopped on request \\(SIGUSR1\\) after step (\\d+); checkpoint at step "
                 "(\\d+) committed")))
      << stopped;
  const int at = std::stoi(m[1].str());
  EXPECT_EQ(m[2].str(), m[1].str());
  EXPECT_GE(at, 3);
  EXPECT_EQ(static_cast<int>(TrainerLosses(stopped).size()), at);
  EXPECT_TRUE(std::filesystem::exists(
      absl::StrCat(dir_, "/stopped/step-", absl::StrFormat("%08d", at), "/MANIFEST")));

  // The resumed run continues exactly where an uninterrupted one would be.
  const int until = at + 10;
  CommandResult resumed =
      TrainOrFail({"--spec=" + spec, absl::StrCat("--exit_after_step=", until)});
  EXPECT_EQ(resumed.exit_code, 75) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr(absl::StrCat("resumed from the checkpoint at step ", at)));
  const std::string straight_spec =
      Spec("checkpoint: {dir: " + dir_ + "/straight, every_steps: 100000, keep: 2}\n", 1000000);
  CommandResult straight =
      TrainOrFail({"--spec=" + straight_spec, absl::StrCat("--exit_after_step=", until)});
  EXPECT_EQ(straight.exit_code, 75) << straight.output;
  auto a = TrainerLosses(straight.output);
  auto b = TrainerLosses(stopped);
  auto c = TrainerLosses(resumed.output);
  ASSERT_EQ(static_cast<int>(a.size()), until);
  ASSERT_EQ(c.size(), 10u);
  for (int i = 0; i < at; ++i) EXPECT_EQ(b[i], a[i]);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(c[i], a[at + i]);
}

// A step whose gradients are NaN ends the run with the fatal exit 78 before its update, so the
// newest checkpoint is the last good step's; resumed from it without the fault, the run follows
// the uninterrupted one to the same parameters.
TEST_F(TrainerTest, ANonFiniteStepIsFatalAndTheLastGoodCheckpointResumes) {
  const std::string straight_spec =
      Spec("checkpoint: {dir: " + dir_ + "/straight, every_steps: 5, keep: 2}\n", 20);
  CommandResult straight = TrainOrFail({"--spec=" + straight_spec});
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  const std::string spec =
      Spec("checkpoint: {dir: " + dir_ + "/nan, every_steps: 5, keep: 2}\n", 20);
  CommandResult failed = TrainOrFail({"--spec=" + spec, "--nan_gradients_at_step=8"});
  EXPECT_EQ(failed.exit_code, 78) << failed.output;  // fatal: a restart would repeat it
  EXPECT_THAT(failed.output, HasSubstr("step 8: the gradient norm is nan"));
  EXPECT_THAT(failed.output, HasSubstr("the parameters are those of step 7"));
  EXPECT_EQ(TrainerLosses(failed.output).size(), 7u) << failed.output;
  // Nothing after the last good step (a run that went on would have written step 10 and, with
  // keep: 2, removed nothing yet).
  EXPECT_EQ(CheckpointDirs(dir_ + "/nan"), std::vector<std::string>{"step-00000005"});
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/nan/step-00000005/MANIFEST"));

  CommandResult resumed = TrainOrFail({"--spec=" + spec});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed from the checkpoint at step 5"));
  EXPECT_EQ(TrainerFinalCrc(resumed.output), TrainerFinalCrc(straight.output));
  EXPECT_FALSE(TrainerFinalCrc(straight.output).empty());
}

TEST_F(TrainerTest, ConfigurationErrorsAreFatalAndNameTheField) {
  CommandResult small_vocab = TrainOrFail({"--spec=" + Spec("", 10, 100)});
  EXPECT_EQ(small_vocab.exit_code, 78) << small_vocab.output;
  EXPECT_THAT(small_vocab.output, HasSubstr("trainer.model.vocab: must be >= 128"));

  const std::string bad_data = dir_ + "/bad.bin";
  std::ofstream(bad_data) << "not tokens";
  CommandResult data = TrainOrFail({"--spec=" + Spec("  data: {path: " + bad_data + "}\n", 10)});
  EXPECT_EQ(data.exit_code, 78) << data.output;
  EXPECT_THAT(data.output, HasSubstr("trainer.data.path"));

  // No GPU is named (CUDA_VISIBLE_DEVICES), so this rank trains on the CPU, which has no bf16.
  CommandResult bf16 = TrainOrFail({"--spec=" + Spec("  precision: bf16\n", 10)});
  EXPECT_EQ(bf16.exit_code, 78) << bf16.output;
  EXPECT_THAT(bf16.output, HasSubstr("trainer.precision: bf16 needs a GPU"));

  // Fused attention: heads of 16 channels are refused by the spec's rules; heads of 32 pass
  // them, and then need a GPU.
  CommandResult narrow = TrainOrFail({"--spec=" + Spec("  attention: fused\n", 10)});
  EXPECT_EQ(narrow.exit_code, 78) << narrow.output;
  EXPECT_THAT(narrow.output, HasSubstr("trainer.attention: fused needs heads of 32 or 64 "
                                       "channels (model.d_model / model.heads), got 64 / 4 = 16"));
  const std::string wide = dir_ + "/fused.yaml";
  std::ofstream(wide) << "name: t\ntrainer:\n  builtin: gpt\n  attention: fused\n"
                      << "  model: {layers: 2, d_model: 64, heads: 2, seq_len: 32, vocab: 128}\n"
                      << "  batch: {micro_batch: 4, global_batch: 8}\n  steps: 10\n"
                      << "  optimizer: {lr: 2.0e-3}\n";
  CommandResult fused = TrainOrFail({"--spec=" + wide});
  EXPECT_EQ(fused.exit_code, 78) << fused.output;
  EXPECT_THAT(fused.output, HasSubstr("trainer.attention: fused needs a GPU"));

  CommandResult mode = TrainOrFail({"--mode=bogus"});
  EXPECT_EQ(mode.exit_code, 78);
  EXPECT_THAT(mode.output, HasSubstr("--mode: must be train or collective-bench"));
}

TEST_F(TrainerTest, CollectiveBenchRunsStandalone) {
  CommandResult r = TrainOrFail({"--mode=collective-bench", "--bench_max_bytes=65536"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data check passed"));
}

}  // namespace
}  // namespace ringmaster::testing
