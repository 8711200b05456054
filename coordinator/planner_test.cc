#include "coordinator/planner.h"

#include <ostream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

v1::ModelSpec Model(int layers, int d_model, int heads, int seq_len, int vocab) {
  v1::ModelSpec m;
  m.set_layers(layers);
  m.set_d_model(d_model);
  m.set_heads(heads);
  m.set_seq_len(seq_len);
  m.set_vocab(vocab);
  return m;
}

v1::ModelSpec Gpt2Small() { return Model(12, 768, 12, 1024, 50257); }

v1::JobSpec Job(int nodes, int devices_per_node, const v1::ModelSpec& model, int micro_batch,
                int global_batch) {
  v1::JobSpec spec;
  spec.set_name("job");
  spec.set_nodes(nodes);
  spec.set_devices_per_node(devices_per_node);
  spec.mutable_trainer()->set_builtin("gpt");
  *spec.mutable_trainer()->mutable_model() = model;
  spec.mutable_trainer()->mutable_batch()->set_micro_batch(micro_batch);
  spec.mutable_trainer()->mutable_batch()->set_global_batch(global_batch);
  spec.mutable_trainer()->set_steps(10);
  return spec;
}

void SetLayout(v1::JobSpec* spec, int tensor, int pipeline, int data) {
  spec->mutable_parallelism()->set_tensor(tensor);
  spec->mutable_parallelism()->set_pipeline(pipeline);
  spec->mutable_parallelism()->set_data(data);
}

PlannerOptions Memory(int64_t bytes) {
  PlannerOptions options;
  options.device_memory_bytes = bytes;
  return options;
}

std::string LayoutOf(const v1::PlanExplanation& plan) {
  const v1::ParallelismSpec& p = plan.parallelism();
  return std::to_string(p.tensor()) + "/" + std::to_string(p.pipeline()) + "/" +
         std::to_string(p.data());
}

std::string AllReasons(const v1::PlanExplanation& plan) {
  std::string out;
  for (const std::string& r : plan.reasons()) out += r + "\n";
  return out;
}

void ExpectReadableReasons(const v1::PlanExplanation& plan) {
  ASSERT_GE(plan.reasons_size(), 3);
  for (const std::string& r : plan.reasons()) {
    EXPECT_FALSE(r.empty());
    EXPECT_EQ(r.find('\n'), std::string::npos) << r;
  }
}

TEST(CountParametersTest, Gpt2Small) {
  // 50304*768 + 1024*768 + 12*(12*768^2 + 13*768) + 2*768
  //   = 38,633,472 + 786,432 + 12*7,087,872 + 1,536 = 124,475,904.
  EXPECT_EQ(CountParameters(Gpt2Small()), 124475904);
  // Already a multiple of 128: the same model.
  EXPECT_EQ(CountParameters(Model(12, 768, 12, 1024, 50304)), 124475904);
}

TEST(CountParametersTest, PadsVocabToMultipleOf128) {
  // V=1 pads to 128: 128*8 + 4*8 + 1*(12*64 + 13*8) + 2*8 = 1024 + 32 + 872 + 16 = 1,944.
  EXPECT_EQ(CountParameters(Model(1, 8, 1, 4, 1)), 1944);
  // V=129 pads to 256: 128*8 more.
  EXPECT_EQ(CountParameters(Model(1, 8, 1, 4, 129)), 1944 + 1024);
}

// The small model used for the hand-checked figures below:
// L=4, d=128, a=4, T=64, V=256 (already padded), b=2 sequences per microbatch.
// P = 256*128 + 64*128 + 4*(12*128^2 + 13*128) + 2*128 = 32,768 + 8,192 + 793,088 + 256 = 834,304.
v1::JobSpec SmallFixedJob() {
  v1::JobSpec spec = Job(2, 4, Model(4, 128, 4, 64, 256), /*micro_batch=*/2, /*global_batch=*/16);
  SetLayout(&spec, 2, 2, 2);  // m = 16 / (2*2) = 4.
  return spec;
}

TEST(PlanTest, FixedLayoutFiguresByHand) {
  absl::StatusOr<v1::PlanExplanation> plan = Plan(SmallFixedJob(), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutOf(*plan), "2/2/2");
  EXPECT_EQ(plan->parameters(), 834304);
  EXPECT_EQ(plan->microbatches(), 4);
  // (p-1)/(m+p-1) = 1/5.
  EXPECT_DOUBLE_EQ(plan->bubble_fraction(), 0.2);
  // 16 bytes * P/(TP*PP) = 16 * 208,576.
  EXPECT_EQ(plan->memory_per_device_bytes(), 3337216);
  // Attention unset, bf16 and heads of 128/4 = 32 channels: fused, as the trainer runs it, so
  // (L/PP) * s*b*34*d / TP = 2 * 64*2 * 4,352 / 2 = 557,056 (no 5*a*s term).
  EXPECT_EQ(plan->activation_bytes_per_microbatch(), 557056);
  EXPECT_THAT(AllReasons(*plan), HasSubstr("bf16 (precision unspecified), fused attention "
                                           "(attention unspecified), ZeRO stage 0"));
  {
    // Materialised: 2 * 64*2 * (4,352 + 5*4*64 = 1,280) / 2 = 720,896.
    v1::JobSpec materialized = SmallFixedJob();
    materialized.mutable_trainer()->set_attention(v1::ATTENTION_MATERIALIZED);
    absl::StatusOr<v1::PlanExplanation> materialized_plan = Plan(materialized, {});
    ASSERT_TRUE(materialized_plan.ok()) << materialized_plan.status();
    EXPECT_EQ(materialized_plan->activation_bytes_per_microbatch(), 720896);
    EXPECT_THAT(AllReasons(*materialized_plan), Not(HasSubstr("fused")));
    // Asked for: the same figure as the default's.
    v1::JobSpec fused = SmallFixedJob();
    fused.mutable_trainer()->set_attention(v1::ATTENTION_FUSED);
    absl::StatusOr<v1::PlanExplanation> fused_plan = Plan(fused, {});
    ASSERT_TRUE(fused_plan.ok()) << fused_plan.status();
    EXPECT_EQ(fused_plan->activation_bytes_per_microbatch(), 557056);
    EXPECT_THAT(AllReasons(*fused_plan), HasSubstr("bf16 (precision unspecified), fused attention, "
                                                   "ZeRO stage 0"));
    // fp32: materialised (the fused kernels are bf16), as the trainer runs it.
    v1::JobSpec fp32 = SmallFixedJob();
    fp32.mutable_trainer()->set_precision(v1::PRECISION_FP32);
    absl::StatusOr<v1::PlanExplanation> fp32_plan = Plan(fp32, {});
    ASSERT_TRUE(fp32_plan.ok()) << fp32_plan.status();
    EXPECT_EQ(fp32_plan->activation_bytes_per_microbatch(), 720896);
  }
  // s*b*d = 64*2*128 = 16,384 elements of 2 bytes (bf16: precision unspecified).
  // TP: 4 all-reduces * 2 layers * 4 microbatches * 2(2-1)/2 * 16,384 * 2 = 1,048,576.
  EXPECT_EQ(plan->tp_bytes_per_step(), 1048576);
  // PP: (1 forward + 1 backward) * 4 microbatches * 16,384 * 2 = 262,144.
  EXPECT_EQ(plan->pp_bytes_per_step(), 262144);
  // DP: 2(2-1)/2 * 208,576 gradients * 2 = 417,152.
  EXPECT_EQ(plan->dp_bytes_per_step(), 417152);
  ExpectReadableReasons(*plan);
  const std::string reasons = AllReasons(*plan);
  EXPECT_THAT(reasons, HasSubstr("layout fixed by the job spec: TP=2 PP=2 DP=2"));
  // 4 layers over 2 stages breaks rule 2; the layout is kept and the reasons say so.
  EXPECT_THAT(reasons, HasSubstr("breaks planner rule 2: PP=2 leaves 2 layers per stage"));
  EXPECT_THAT(reasons, HasSubstr("(p-1)/(m+p-1) = 1/5"));
  EXPECT_THAT(reasons, HasSubstr("device memory unknown"));
}

TEST(PlanTest, Fp32DoublesCommunicationAndShardsItsOwnStateSplit) {
  v1::JobSpec spec = SmallFixedJob();
  spec.mutable_trainer()->set_precision(v1::PRECISION_FP32);
  spec.mutable_trainer()->set_zero_stage(1);
  absl::StatusOr<v1::PlanExplanation> plan = Plan(spec, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tp_bytes_per_step(), 2 * 1048576);
  EXPECT_EQ(plan->pp_bytes_per_step(), 2 * 262144);
  EXPECT_EQ(plan->dp_bytes_per_step(), 2 * 417152);
  // ZeRO-1, fp32: 208,576 * (4 weights + 4 grads + 8/2 moments) = 208,576 * 12.
  EXPECT_EQ(plan->memory_per_device_bytes(), 2502912);
}

TEST(PlanTest, ZeroStagesShardState) {
  struct Case {
    int stage;
    int64_t memory;
    int64_t dp_bytes;
  };
  // bf16, DP=2, 208,576 parameters per device; state bytes 2 weights + 2 grads + 12 optimizer.
  const Case cases[] = {
      {0, 208576 * 16, 417152},
      {1, 208576 * (2 + 2 + 6), 417152},  // Optimizer state halved.
      {2, 208576 * (2 + 1 + 6), 417152},  // And the gradients.
      {3, 208576 * (1 + 1 + 6), 625728},  // And the weights; 3(2-1)/2 * 208,576 * 2 sent.
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = SmallFixedJob();
    spec.mutable_trainer()->set_zero_stage(c.stage);
    absl::StatusOr<v1::PlanExplanation> plan = Plan(spec, {});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->memory_per_device_bytes(), c.memory) << "stage " << c.stage;
    EXPECT_EQ(plan->dp_bytes_per_step(), c.dp_bytes) << "stage " << c.stage;
  }
}

TEST(PlanTest, FixedGpt2LayoutIsExplainedNotChanged) {
  // 2 nodes x 8, TP=4 PP=2 DP=2, b=4, B=96: m = 96/(4*2) = 12, bubble 1/13. Unknown memory would
  // make the planner choose pure DP; a fixed layout is kept.
  v1::JobSpec spec = Job(2, 8, Gpt2Small(), 4, 96);
  SetLayout(&spec, 4, 2, 2);
  absl::StatusOr<v1::PlanExplanation> plan = Plan(spec, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutOf(*plan), "4/2/2");
  EXPECT_EQ(plan->microbatches(), 12);
  EXPECT_DOUBLE_EQ(plan->bubble_fraction(), 1.0 / 13.0);
  EXPECT_EQ(plan->parameters(), 124475904);
  // 124,475,904 / 8 * 16 = 248,951,808.
  EXPECT_EQ(plan->memory_per_device_bytes(), 248951808);
  EXPECT_THAT(AllReasons(*plan), Not(HasSubstr("breaks planner rule")));
  ExpectReadableReasons(*plan);
}

TEST(PlanTest, FixedLayoutThatDoesNotFitIsKeptWithANote) {
  v1::JobSpec spec = Job(2, 8, Gpt2Small(), 4, 96);
  SetLayout(&spec, 1, 1, 16);
  absl::StatusOr<v1::PlanExplanation> plan = Plan(spec, Memory(int64_t{1} << 30));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutOf(*plan), "1/1/16");
  EXPECT_THAT(AllReasons(*plan), HasSubstr("note: does not fit in memory"));
}

// GPT-2 124M on one node of 8 devices, b=4, B=256, attention materialised (unset it would be
// fused: no 5as term). Memory per device (state + activations of min(m, PP) microbatches;
// activations per layer s*b*(34d + 5as) = 4,096*87,552 = 358,612,992):
//   TP=1 PP=1: 1,991,614,464 + 12 layers * 358,612,992         = 6,294,970,368
//   TP=2 PP=1:   995,807,232 + 2,151,677,952                    = 3,147,485,184
//   TP=1 PP=2:   995,807,232 + 2 in flight * 2,151,677,952      = 5,299,163,136
//   TP=4 PP=1:   497,903,616 + 1,075,838,976                    = 1,573,742,592
//   TP=2 PP=2:   497,903,616 + 2 * 1,075,838,976                = 2,649,581,568
//   TP=4 PP=2:   248,951,808 + 2 * 537,919,488                  = 1,324,790,784
// TP=8 breaks rule 1 (12 heads); PP=4 breaks rule 2 (3 layers per stage).
struct AutoCase {
  std::string name;
  int64_t memory;
  std::string want;  // TP/PP/DP.
  int64_t want_state_bytes;
  std::string want_reason;
};

void PrintTo(const AutoCase& c, std::ostream* os) { *os << c.name; }

class AutoLayoutTest : public ::testing::TestWithParam<AutoCase> {};

TEST_P(AutoLayoutTest, Chooses) {
  const AutoCase& c = GetParam();
  v1::JobSpec spec = Job(1, 8, Gpt2Small(), 4, 256);
  spec.mutable_trainer()->set_attention(v1::ATTENTION_MATERIALIZED);
  absl::StatusOr<v1::PlanExplanation> plan = Plan(spec, Memory(c.memory));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutOf(*plan), c.want);
  EXPECT_EQ(plan->memory_per_device_bytes(), c.want_state_bytes);
  ExpectReadableReasons(*plan);
  const std::string reasons = AllReasons(*plan);
  EXPECT_THAT(reasons, HasSubstr(c.want_reason)) << reasons;
  EXPECT_THAT(reasons, HasSubstr("excluded TP=8 PP=1 DP=1 by rule 1: TP=8 does not divide the 12 "
                                 "heads"));
  EXPECT_THAT(reasons, HasSubstr("excluded TP=1 PP=4 DP=2 by rule 2: PP=4 leaves 3 layers per "
                                 "stage, fewer than 4"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AutoLayoutTest,
    ::testing::Values(
        AutoCase{"UnknownMemoryPureDp", 0, "1/1/8", 1991614464, "device memory unknown"},
        AutoCase{"PlentyPureDp", int64_t{80} << 30, "1/1/8", 1991614464,
                 "chose TP=1 PP=1 DP=8: the most data parallelism that fits"},
        // TP=2 and PP=2 both fit; on the tie TP wins.
        AutoCase{"TightPrefersTpOnTie", 6000000000, "2/1/4", 995807232,
                 "does not fit: TP=1 PP=1 DP=8 needs 5.9 GiB per device"},
        AutoCase{"TighterTp4", 2000000000, "4/1/2", 497903616, "chose TP=4 PP=1 DP=2"},
        // TP cannot grow past 4 (heads), so PP comes in.
        AutoCase{"TightestThenPp", 1400000000, "4/2/1", 248951808, "chose TP=4 PP=2 DP=1"},
        AutoCase{"ExactlyFits", 1324790784, "4/2/1", 248951808, "chose TP=4 PP=2 DP=1"},
        // Nothing fits: rule 5 takes the smallest estimate.
        AutoCase{"NothingFits", 1324790783, "4/2/1", 248951808,
                 "no layout fits in memory; chose TP=4 PP=2 DP=1, the smallest estimate"}),
    [](const ::testing::TestParamInfo<AutoCase>& info) { return info.param.name; });

TEST(PlanTest, AutoPureDpAcrossNodesWithUnknownMemory) {
  absl::StatusOr<v1::PlanExplanation> plan = Plan(Job(2, 8, Gpt2Small(), 4, 256), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutOf(*plan), "1/1/16");
  EXPECT_EQ(plan->microbatches(), 4);  // 256 / (4*16).
  EXPECT_DOUBLE_EQ(plan->bubble_fraction(), 0.0);
  EXPECT_EQ(plan->tp_bytes_per_step(), 0);
  EXPECT_EQ(plan->pp_bytes_per_step(), 0);
  // 2(16-1)/16 * 124,475,904 * 2 bytes = 466,784,640.
  EXPECT_EQ(plan->dp_bytes_per_step(), 466784640);
}

// A model with one head (TP=1 only) on 2 nodes x 1 device: the candidates are PP=1 DP=2 and
// PP=2 DP=1. With 1 byte of device memory nothing fits, so rule 5 picks the smaller estimate,
// which is PP=2 (half the state, the same activations) whenever rules 2 and 3 allow it.
v1::JobSpec TwoRankJob(int layers, int global_batch) {
  return Job(2, 1, Model(layers, 64, 1, 32, 128), /*micro_batch=*/1, global_batch);
}

TEST(PlanTest, RuleTwoExcludesShallowStages) {
  absl::StatusOr<v1::PlanExplanation> deep = Plan(TwoRankJob(8, 8), Memory(1));
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_EQ(LayoutOf(*deep), "1/2/1");  // 4 layers per stage: allowed.

  absl::StatusOr<v1::PlanExplanation> shallow = Plan(TwoRankJob(6, 8), Memory(1));
  ASSERT_TRUE(shallow.ok()) << shallow.status();
  EXPECT_EQ(LayoutOf(*shallow), "1/1/2");
  EXPECT_THAT(AllReasons(*shallow),
              HasSubstr("excluded TP=1 PP=2 DP=1 by rule 2: PP=2 leaves 3 layers per stage, "
                        "fewer than 4"));
}

TEST(PlanTest, RuleThreeExcludesTooFewMicrobatches) {
  absl::StatusOr<v1::PlanExplanation> plenty = Plan(TwoRankJob(8, 8), Memory(1));
  ASSERT_TRUE(plenty.ok()) << plenty.status();
  EXPECT_EQ(LayoutOf(*plenty), "1/2/1");  // m = 8 >= 4*(2-1).

  absl::StatusOr<v1::PlanExplanation> few = Plan(TwoRankJob(8, 2), Memory(1));
  ASSERT_TRUE(few.ok()) << few.status();
  EXPECT_EQ(LayoutOf(*few), "1/1/2");
  EXPECT_THAT(AllReasons(*few),
              HasSubstr("excluded TP=1 PP=2 DP=1 by rule 3: 2 microbatches per step, fewer than "
                        "4*(PP-1) = 4"));
}

TEST(PlanTest, FewLayersAreFineWithoutPipeline) {
  // Rule 2's 4 layers per stage applies only to PP > 1: a 2-layer model runs pure DP.
  absl::StatusOr<v1::PlanExplanation> plan = Plan(Job(1, 2, Model(2, 32, 2, 16, 64), 2, 8), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutOf(*plan), "1/1/2");
}

TEST(PlanTest, NoValidLayoutNamesParallelismAndTheClosestCandidate) {
  // 1 node x 2 devices, 3 heads, 4 layers, B=3, b=1: TP=2 breaks rule 1 (3 heads), PP=2 rule 2
  // (2 layers per stage), and pure DP=2 rule 3 (3 sequences do not split over 2 replicas).
  absl::StatusOr<v1::PlanExplanation> plan = Plan(Job(1, 2, Model(4, 48, 3, 16, 64), 1, 3), {});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "parallelism: no layout satisfies rules 1-3 for 2 ranks; closest: TP=1 PP=1 DP=2 "
            "breaks rule 3: global_batch 3 is not divisible by micro_batch*DP = 1*2");
}

TEST(PlanTest, CommandTrainerGetsPureDp) {
  v1::JobSpec spec;
  spec.set_name("cmd");
  spec.set_nodes(2);
  spec.set_devices_per_node(4);
  spec.mutable_trainer()->mutable_command()->add_argv("python3");
  spec.mutable_trainer()->mutable_command()->add_argv("train.py");
  absl::StatusOr<v1::PlanExplanation> plan = Plan(spec, Memory(int64_t{1} << 30));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutOf(*plan), "1/1/8");
  EXPECT_EQ(plan->parameters(), 0);
  EXPECT_EQ(plan->memory_per_device_bytes(), 0);
  EXPECT_EQ(plan->activation_bytes_per_microbatch(), 0);
  EXPECT_EQ(plan->dp_bytes_per_step(), 0);
  EXPECT_DOUBLE_EQ(plan->bubble_fraction(), 0.0);
  ExpectReadableReasons(*plan);
  EXPECT_THAT(AllReasons(*plan), HasSubstr("pure data parallelism: TP=1 PP=1 DP=8"));

  SetLayout(&spec, 2, 1, 4);
  plan = Plan(spec, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LayoutOf(*plan), "2/1/4");
}

TEST(PlanTest, InconsistentInputIsRefusedWithTheField) {
  v1::JobSpec partial = Job(1, 8, Gpt2Small(), 4, 256);
  partial.mutable_parallelism()->set_tensor(2);
  EXPECT_EQ(Plan(partial, {}).status().message(),
            "parallelism: set tensor, pipeline and data all >= 1, or none of them");

  v1::JobSpec mismatch = Job(1, 8, Gpt2Small(), 4, 256);
  SetLayout(&mismatch, 2, 1, 2);
  EXPECT_EQ(Plan(mismatch, {}).status().message(),
            "parallelism: tensor*pipeline*data (4) must equal nodes*devices_per_node (8)");

  v1::JobSpec no_batch = Job(1, 8, Gpt2Small(), 0, 256);
  EXPECT_EQ(Plan(no_batch, {}).status().message(),
            "trainer.batch.micro_batch: must be >= 1, got 0");
}

}  // namespace
}  // namespace ringmaster::coordinator
