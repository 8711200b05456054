#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/model/cpu_device.h"
#include "trainer/optim/adamw_optimizer.h"
#include "trainer/optim/lr_schedule.h"

namespace ringmaster::trainer {
namespace {

TEST(LrScheduleTest, WarmsUpLinearlyThenDecaysByCosineToMinLr) {
  LrSchedule s{1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(s.At(0), 0.25);
  EXPECT_DOUBLE_EQ(s.At(3), 1.0);
  EXPECT_DOUBLE_EQ(s.At(4), 1.0);
  EXPECT_NEAR(s.At(9), 0.55, 1e-12);  // halfway through the decay
  EXPECT_NEAR(s.At(14), 0.1, 1e-12);
  EXPECT_NEAR(s.At(100), 0.1, 1e-12);
  LrSchedule no_warmup{2.0, 0.0, 0, 10};
  EXPECT_DOUBLE_EQ(no_warmup.At(0), 2.0);
}

TEST(LrScaleRampTest, RampsLinearlyFromTheOldScaleToTheNewOverTheWarmup) {
  // DP 4 -> 2 at step 8 (8 steps done), ramp of 4 steps: 1 -> 0.5 over steps 8..11.
  const LrScaleRamp full;  // the uninterrupted run's: no scaling
  EXPECT_TRUE(full.identity());
  const LrScaleRamp down = full.Retarget(8, 0.5, 4);
  EXPECT_DOUBLE_EQ(down.At(7), 1.0);
  EXPECT_DOUBLE_EQ(down.At(8), 0.875);
  EXPECT_DOUBLE_EQ(down.At(9), 0.75);
  EXPECT_DOUBLE_EQ(down.At(10), 0.625);
  EXPECT_DOUBLE_EQ(down.At(11), 0.5);
  EXPECT_DOUBLE_EQ(down.At(100), 0.5);
  // The learning rate actually used is the schedule's times the ramp's.
  const LrSchedule schedule{1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(schedule.At(9) * down.At(9), 0.55 * 0.75);
  // Growing back 2 -> 4 at step 10, mid-ramp: from the factor of step 9 (0.75) up to 1.
  const LrScaleRamp up = down.Retarget(10, 1.0, 4);
  EXPECT_DOUBLE_EQ(up.At(9), 0.75);
  EXPECT_DOUBLE_EQ(up.At(10), 0.8125);
  EXPECT_DOUBLE_EQ(up.At(13), 1.0);
  // A restart at the same degree mid-ramp goes on with the same ramp.
  const LrScaleRamp again = down.Retarget(10, 0.5, 4);
  EXPECT_DOUBLE_EQ(again.At(10), 0.625);
  EXPECT_EQ(again.start, 8);
  // No warmup: the new factor at once.
  EXPECT_DOUBLE_EQ(full.Retarget(8, 0.25, 0).At(8), 0.25);
  EXPECT_DOUBLE_EQ(full.Retarget(8, 0.25, 1).At(8), 0.25);
  // Unchanged: the identity stays.
  EXPECT_TRUE(full.Retarget(8, 1.0, 4).identity());
}

class AdamWOptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = MakeCpuDevice(1);
    config_ = *GptConfig::Create(1, 4, 2, 3, 10);
    layout_ = std::make_unique<ParameterLayout>(config_, ModelShard::WholeModel(config_));
    n_ = layout_->size() + 6;  // with padding past the last tensor
    params_ = *device_->Allocate(n_, DType::kF32);
    grads_ = *device_->Allocate(n_, DType::kF32);
    for (int64_t i = 0; i < n_; ++i) {
      params_.tensor().f32()[i] = 0.5f + 0.001f * i;
      grads_.tensor().f32()[i] = std::sin(0.1f * i);
    }
  }
  std::unique_ptr<AdamWOptimizer> Make(std::vector<FlatRange> owned) {
    auto opt = AdamWOptimizer::Create(device_.get(), *layout_, std::move(owned), params_.tensor(),
                                      grads_.tensor(), AdamWConfig{0.9, 0.95, 1e-8, 0.1});
    EXPECT_TRUE(opt.ok()) << opt.status();
    return std::move(*opt);
  }
  std::vector<float> Params() const {
    return std::vector<float>(params_.tensor().f32(), params_.tensor().f32() + n_);
  }

  std::unique_ptr<Device> device_;
  GptConfig config_;
  std::unique_ptr<ParameterLayout> layout_;
  int64_t n_ = 0;
  DeviceBuffer params_, grads_;
};

TEST_F(AdamWOptimizerTest, ShardsTogetherEqualTheWholeAndDecayOnlyMatrices) {
  const std::vector<float> before = Params();
  auto whole = Make({{0, n_}});
  whole->Step(0.01f, 1, 1.0f);
  whole->Step(0.01f, 2, 0.5f);
  const std::vector<float> expected = Params();
  // Padding is never touched; a LayerNorm bias with zero gradient is not decayed.
  for (int64_t i = layout_->size(); i < n_; ++i) EXPECT_EQ(expected[i], before[i]);

  std::copy(before.begin(), before.end(), params_.tensor().f32());
  const int64_t cut = layout_->layers()[0].qkvw + 3;  // inside a tensor
  auto a = Make({{0, cut}});
  auto b = Make({{cut, n_ - cut}});
  for (int t = 1; t <= 2; ++t) {
    a->Step(0.01f, t, t == 1 ? 1.0f : 0.5f);
    b->Step(0.01f, t, t == 1 ? 1.0f : 0.5f);
  }
  EXPECT_EQ(Params(), expected);
}

TEST_F(AdamWOptimizerTest, WeightDecayFollowsTheLayout) {
  for (int64_t i = 0; i < n_; ++i) grads_.tensor().f32()[i] = 0.0f;
  const std::vector<float> before = Params();
  Make({{0, n_}})->Step(0.5f, 1, 1.0f);
  const std::vector<float> after = Params();
  for (const ParamTensor& t : layout_->tensors()) {
    const float want = t.decay ? before[t.offset] * (1 - 0.5f * 0.1f) : before[t.offset];
    EXPECT_FLOAT_EQ(after[t.offset], want) << t.name;
  }
}

// ZeRO-3's form: the owned ranges' parameters and gradients stored compactly, in order. Two
// steps update them exactly as the flat optimizer updates the same ranges, and the gradient
// squares can be restricted to some tensors (the whole-model norm counts each tensor once).
TEST_F(AdamWOptimizerTest, CompactParametersAndGradientsMatchTheFlatLayout) {
  const std::vector<FlatRange> owned = {{3, 40}, {60, 25}};
  const std::vector<float> before = Params();
  std::vector<float> compact_p, compact_g;
  for (const FlatRange& r : owned) {
    for (int64_t i = r.offset; i < r.offset + r.size; ++i) {
      compact_p.push_back(before[i]);
      compact_g.push_back(grads_.tensor().f32()[i]);
    }
  }
  auto flat = Make(owned);
  flat->Step(0.01f, 1, 1.0f);
  flat->Step(0.01f, 2, 0.5f);
  const std::vector<float> want = Params();
  Tensor p{compact_p.data(), static_cast<int64_t>(compact_p.size()), DType::kF32};
  Tensor g{compact_g.data(), static_cast<int64_t>(compact_g.size()), DType::kF32};
  auto compact = *AdamWOptimizer::Create(device_.get(), *layout_, owned, p, g,
                                         AdamWConfig{0.9, 0.95, 1e-8, 0.1},
                                         /*compact_gradients=*/true, /*compact_parameters=*/true);
  compact->Step(0.01f, 1, 1.0f);
  compact->Step(0.01f, 2, 0.5f);
  size_t k = 0;
  for (const FlatRange& r : owned) {
    for (int64_t i = r.offset; i < r.offset + r.size; ++i) ASSERT_EQ(compact_p[k++], want[i]) << i;
  }
  std::vector<bool> none(layout_->tensors().size(), false), all(none.size(), true);
  EXPECT_EQ(*compact->OwnedGradientSquares(&none), 0.0);
  EXPECT_DOUBLE_EQ(*compact->OwnedGradientSquares(&all), *compact->OwnedGradientSquares());
  EXPECT_GT(*compact->OwnedGradientSquares(), 0.0);
}

TEST_F(AdamWOptimizerTest, OwnedGradientSquaresSumsEveryOwnedSegmentInOneCall) {
  // Ranges that cut across several parameter tensors, and the padding past the last one.
  const std::vector<FlatRange> owned = {{3, 40}, {60, 25}, {layout_->size() - 5, 11}};
  double want = 0;
  for (const FlatRange& r : owned) {
    for (int64_t i = r.offset; i < std::min(r.offset + r.size, layout_->size()); ++i) {
      const double g = grads_.tensor().f32()[i];
      want += g * g;
    }
  }
  auto opt = Make(owned);
  absl::StatusOr<double> got = opt->OwnedGradientSquares();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, want, 1e-12 * want);
}

TEST_F(AdamWOptimizerTest, StateRoundTripsThroughSaveAndLoad) {
  auto opt = Make({{2, 10}, {20, 7}});
  EXPECT_EQ(opt->state_size(), 17);
  opt->Step(0.01f, 1, 1.0f);
  std::vector<float> master(17), m(17), v(17);
  ASSERT_TRUE(opt->SaveState(master.data(), m.data(), v.data()).ok());
  EXPECT_EQ(master[0], params_.tensor().f32()[2]);
  EXPECT_EQ(master[10], params_.tensor().f32()[20]);
  opt->Step(0.01f, 2, 1.0f);
  const std::vector<float> two_steps = Params();
  auto fresh = Make({{2, 10}, {20, 7}});
  ASSERT_TRUE(fresh->LoadState(master.data(), m.data(), v.data()).ok());
  fresh->Step(0.01f, 2, 1.0f);
  EXPECT_EQ(Params(), two_steps);
  auto bad = AdamWOptimizer::Create(device_.get(), *layout_, {{5, 3}, {6, 1}}, params_.tensor(),
                                    grads_.tensor(), {});
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace ringmaster::trainer
