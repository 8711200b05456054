#include "trainer/model/gpt.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/model/cpu_device.h"
#include "trainer/model/random.h"

namespace ringmaster::trainer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GptConfigTest, PadsTheVocabularyAndCountsGpt2SmallLikeLlmC) {
  auto c = GptConfig::Create(12, 768, 12, 1024, 50257);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->padded_vocab, 50304);
  // llm.c prints num_parameters: 124475904 for GPT-2 124M with the padded vocabulary.
  EXPECT_EQ(c->ParameterCount(), 124475904);
  EXPECT_DOUBLE_EQ(c->FlopsPerToken(), 6.0 * 124475904 + 6.0 * 12 * 768 * 1024);
}

TEST(GptConfigTest, RefusesBadShapesNamingTheField) {
  auto bad = GptConfig::Create(2, 10, 3, 8, 50);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("model.d_model: must be divisible by model.heads (3), got 10"));
  bad = GptConfig::Create(0, 8, 2, 8, 50);
  EXPECT_THAT(bad.status().message(), HasSubstr("model.layers: must be in [1, 1024], got 0"));
  bad = GptConfig::Create(1, 8, 2, 8, 1);
  EXPECT_THAT(bad.status().message(), HasSubstr("model.vocab"));
}

TEST(ParameterLayoutTest, IsContiguousLayerMajorAndSumsToTheParameterCount) {
  GptConfig c = *GptConfig::Create(3, 16, 4, 8, 100);
  ParameterLayout layout(c, ModelShard::WholeModel(c));
  EXPECT_EQ(layout.size(), c.ParameterCount());
  int64_t expected = 0;
  for (const ParamTensor& t : layout.tensors()) {
    EXPECT_EQ(t.offset, expected) << t.name;
    expected += t.size;
  }
  EXPECT_EQ(layout.wte(), 0);
  ASSERT_EQ(layout.layers().size(), 3u);
  EXPECT_EQ(layout.layers()[0].begin, layout.wpe() + 8 * 16);
  EXPECT_EQ(layout.layers()[1].begin, layout.layers()[0].end);
  EXPECT_EQ(layout.lnfw(), layout.layers()[2].end);
  EXPECT_EQ(layout.tensors()[0].name, "wte");
  EXPECT_EQ(layout.tensors()[0].size, 128 * 16);
}

TEST(ParameterLayoutTest, TensorParallelShardsSplitHeadsAndMlp) {
  GptConfig c = *GptConfig::Create(1, 16, 4, 8, 100);
  ModelShard shard = ModelShard::WholeModel(c);
  shard.tp_size = 2;
  shard.tp_rank = 1;
  ParameterLayout layout(c, shard);
  const LayerOffsets& o = layout.layers()[0];
  EXPECT_EQ(o.qkvb - o.qkvw, 3 * 8 * 16);  // 3 blocks of C/2 rows
  EXPECT_EQ(o.attprojb - o.attprojw, 16 * 8);
  EXPECT_EQ(o.fcb - o.fcw, 32 * 16);
  EXPECT_EQ(layout.local_heads(), 2);
  ModelShard bad = shard;
  bad.tp_size = 3;
  bad.tp_rank = 0;
  EXPECT_THAT(bad.Validate(c).message(), HasSubstr("parallelism.tensor: must divide model.heads"));
}

class GptTest : public ::testing::Test {
 protected:
  static constexpr int kB = 2, kT = 5;
  void SetUp() override {
    device_ = MakeCpuDevice(1);
    config_ = *GptConfig::Create(2, 8, 2, 6, 11);
    auto gpt = Gpt::Create(device_.get(), ParameterLayout(config_, ModelShard::WholeModel(config_)),
                           kB, kT);
    ASSERT_TRUE(gpt.ok()) << gpt.status();
    gpt_ = std::move(*gpt);
    Rng rng(5);
    for (int i = 0; i < kB * kT; ++i) {
      inputs_.push_back(static_cast<int32_t>(rng.Below(11)));
      targets_.push_back(static_cast<int32_t>(rng.Below(11)));
    }
  }
  // Random weights large enough that every operation matters (LayerNorm gains away from 1).
  void RandomizeParameters(uint64_t seed) {
    Rng rng(seed);
    float* p = gpt_->params().f32();
    for (int64_t i = 0; i < gpt_->params().size; ++i) p[i] = 0.4f * rng.NextNormal();
  }
  double Loss() { return *gpt_->Forward(inputs_.data(), targets_.data(), 0.0f); }

  std::unique_ptr<Device> device_;
  GptConfig config_;
  std::unique_ptr<Gpt> gpt_;
  std::vector<int32_t> inputs_, targets_;
};

TEST_F(GptTest, InitialLossIsNearLogVocabulary) {
  ASSERT_TRUE(gpt_->InitParameters(1).ok());
  EXPECT_NEAR(Loss(), std::log(11.0), 0.1);
}

TEST_F(GptTest, InitialisationIsDeterministicAndFollowsGpt2) {
  ASSERT_TRUE(gpt_->InitParameters(7).ok());
  std::vector<float> first(gpt_->params().f32(), gpt_->params().f32() + gpt_->params().size);
  ASSERT_TRUE(gpt_->InitParameters(7).ok());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), gpt_->params().f32()));
  const LayerOffsets& o = gpt_->layout().layers()[0];
  EXPECT_EQ(gpt_->params().f32()[o.ln1w], 1.0f);
  EXPECT_EQ(gpt_->params().f32()[o.qkvb], 0.0f);
  ASSERT_TRUE(gpt_->InitParameters(8).ok());
  EXPECT_NE(gpt_->params().f32()[0], first[0]);
}

// Every tensor's gradient against a central finite difference of the loss along a random
// direction within that tensor: (L(p + h d) - L(p - h d)) / 2h == g . d within 1%.
TEST_F(GptTest, GradientsMatchFiniteDifferencesForEveryTensor) {
  RandomizeParameters(11);
  gpt_->ZeroGradients();
  ASSERT_TRUE(gpt_->Forward(inputs_.data(), targets_.data(), 1.0f).ok());
  ASSERT_TRUE(gpt_->Backward(nullptr).ok());
  const std::vector<float> grads(gpt_->grads().f32(), gpt_->grads().f32() + gpt_->grads().size);
  float* p = gpt_->params().f32();
  Rng rng(3);
  for (const ParamTensor& t : gpt_->layout().tensors()) {
    std::vector<float> d(t.size);
    double norm = 0;
    for (float& x : d) {
      x = rng.NextNormal();
      norm += double{x} * x;
    }
    double analytic = 0;
    for (int64_t i = 0; i < t.size; ++i) {
      d[i] /= std::sqrt(norm);
      analytic += double{grads[t.offset + i]} * d[i];
    }
    const float h = 1e-2f;
    std::vector<float> saved(p + t.offset, p + t.offset + t.size);
    for (int64_t i = 0; i < t.size; ++i) p[t.offset + i] = saved[i] + h * d[i];
    const double plus = Loss();
    for (int64_t i = 0; i < t.size; ++i) p[t.offset + i] = saved[i] - h * d[i];
    const double minus = Loss();
    std::copy(saved.begin(), saved.end(), p + t.offset);
    const double numeric = (plus - minus) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 1e-2 * std::abs(numeric) + 2e-4)
        << t.name << " analytic " << analytic << " numeric " << numeric;
  }
}

TEST_F(GptTest, BackwardAccumulatesAndReportsFinalRangesFromTheEnd) {
  RandomizeParameters(12);
  gpt_->ZeroGradients();
  ASSERT_TRUE(gpt_->Forward(inputs_.data(), targets_.data(), 1.0f).ok());
  std::vector<int64_t> finals;
  ASSERT_TRUE(gpt_->Backward([&](int64_t low) { finals.push_back(low); }).ok());
  const ParameterLayout& l = gpt_->layout();
  EXPECT_THAT(finals, ElementsAre(l.lnfw(), l.layers()[1].begin, l.layers()[0].begin, 0));
  const std::vector<float> once(gpt_->grads().f32(), gpt_->grads().f32() + gpt_->grads().size);
  // A second microbatch (the same data, scale 0.5) adds half the gradient again.
  ASSERT_TRUE(gpt_->Forward(inputs_.data(), targets_.data(), 0.5f).ok());
  ASSERT_TRUE(gpt_->Backward(nullptr).ok());
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_NEAR(gpt_->grads().f32()[i], 1.5f * once[i], 1e-6f + 1e-5f * std::abs(once[i])) << i;
  }
}

TEST_F(GptTest, BackwardWithoutATrainingForwardIsRefused) {
  ASSERT_TRUE(gpt_->InitParameters(1).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(gpt_->Backward(nullptr)));
  Loss();  // evaluation only
  EXPECT_TRUE(absl::IsFailedPrecondition(gpt_->Backward(nullptr)));
}

TEST_F(GptTest, TokensOutsideTheVocabularyAreRefused) {
  inputs_[3] = 11;
  auto loss = gpt_->Forward(inputs_.data(), targets_.data(), 1.0f);
  EXPECT_TRUE(absl::IsInvalidArgument(loss.status()));
  EXPECT_THAT(loss.status().message(), HasSubstr("token 11 at position 3"));
}

}  // namespace
}  // namespace ringmaster::trainer
