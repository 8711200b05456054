// Two data-parallel ranks (threads over loopback Gloo) reduce synthetic gradients and take
// optimizer steps with ZeRO 0, 1 and 2; the parameters must equal one rank stepping on the
// summed gradients.
#include "trainer/parallel/data_parallel.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/comm/testing.h"
#include "trainer/model/cpu_device.h"

namespace ringmaster::trainer {
namespace {

constexpr int kRanks = 2;

float Grad(int rank, int64_t i) { return std::sin(0.37f * i + rank) * (rank + 1); }

class DataParallelTest : public ::testing::TestWithParam<int> {
 protected:
  GptConfig config_ = *GptConfig::Create(2, 16, 2, 8, 100);
  ParameterLayout layout_{config_, ModelShard::WholeModel(config_)};
  AdamWConfig adamw_{0.9, 0.95, 1e-8, 0.1};
};

TEST_P(DataParallelTest, MatchesOneRankOnSummedGradients) {
  const int zero = GetParam();
  // Reference: one rank, gradients summed by hand, three steps.
  auto device = MakeCpuDevice(1);
  const int64_t padded1 = PaddedSize(layout_.size(), 1);
  DeviceBuffer p1 = *device->Allocate(padded1, DType::kF32);
  DeviceBuffer g1 = *device->Allocate(padded1, DType::kF32);
  for (int64_t i = 0; i < layout_.size(); ++i) p1.tensor().f32()[i] = 0.01f * std::cos(0.1f * i);
  InMemoryStore solo_store;
  auto solo = testing::ConnectLoopback("solo", 0, 1, &solo_store);
  ASSERT_TRUE(solo.ok());
  auto ref = *DataParallel::Create(device.get(), solo->get(), layout_, p1.tensor(), g1.tensor(),
                                   {0, 1024}, adamw_);
  for (int t = 1; t <= 3; ++t) {
    for (int64_t i = 0; i < layout_.size(); ++i) {
      g1.tensor().f32()[i] = (Grad(0, i + t) + Grad(1, i + t));
    }
    ref->BeginStep();
    ref->BeginMicrobatch(true);
    ASSERT_TRUE(ref->FinishReduction().ok());
    const double norm = *ref->GradientNorm();
    ASSERT_TRUE(ref->Step(0.01f, t, static_cast<float>(1.0 / norm)).ok());
  }

  InMemoryStore store;
  std::vector<std::vector<float>> results(kRanks);
  auto statuses = testing::RunRanks(kRanks, [&](int rank) -> absl::Status {
    auto dev = MakeCpuDevice(1);
    auto comm = testing::ConnectLoopback("dp", rank, kRanks, &store);
    if (!comm.ok()) return comm.status();
    const int64_t padded = PaddedSize(layout_.size(), kRanks);
    DeviceBuffer p = *dev->Allocate(padded, DType::kF32);
    DeviceBuffer g = *dev->Allocate(padded, DType::kF32);
    for (int64_t i = 0; i < layout_.size(); ++i) p.tensor().f32()[i] = 0.01f * std::cos(0.1f * i);
    auto dp = DataParallel::Create(dev.get(), comm->get(), layout_, p.tensor(), g.tensor(),
                                   {zero, 1024}, adamw_);
    if (!dp.ok()) return dp.status();
    for (int t = 1; t <= 3; ++t) {
      (*dp)->BeginStep();
      (*dp)->BeginMicrobatch(true);
      // Gradients become final from the end, as in a backward pass.
      for (int64_t end = layout_.size(); end > 0; end -= 700) {
        const int64_t from = std::max<int64_t>(end - 700, 0);
        for (int64_t i = from; i < end; ++i) g.tensor().f32()[i] = Grad(rank, i + t);
        (*dp)->OnGradientsFinal(from);
      }
      if (auto s = (*dp)->FinishReduction(); !s.ok()) return s;
      auto norm = (*dp)->GradientNorm();
      if (!norm.ok()) return norm.status();
      if (auto s = (*dp)->Step(0.01f, t, static_cast<float>(1.0 / *norm)); !s.ok()) return s;
    }
    results[rank].assign(p.tensor().f32(), p.tensor().f32() + layout_.size());
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(results[0], results[1]);  // replicas stay identical
  for (int64_t i = 0; i < layout_.size(); ++i) {
    ASSERT_NEAR(results[0][i], p1.tensor().f32()[i], 1e-6) << "element " << i;
  }
}

// Stage 2 writes gradients through the model's sink; gpt_data_parallel_test.cc covers it with
// a real model.
INSTANTIATE_TEST_SUITE_P(ZeroStages, DataParallelTest, ::testing::Values(0, 1));

TEST(DataParallelOptionsTest, RefusesUnknownZeroStagesAndWrongBufferSizes) {
  GptConfig config = *GptConfig::Create(1, 8, 2, 4, 50);
  ParameterLayout layout(config, ModelShard::WholeModel(config));
  auto device = MakeCpuDevice(1);
  InMemoryStore store;
  auto comm = testing::ConnectLoopback("one", 0, 1, &store);
  DeviceBuffer p = *device->Allocate(PaddedSize(layout.size(), 1), DType::kF32);
  DeviceBuffer small = *device->Allocate(layout.size() - 1, DType::kF32);
  auto bad = DataParallel::Create(device.get(), comm->get(), layout, p.tensor(), p.tensor(),
                                  {4, 1024}, {});
  EXPECT_NE(bad.status().message().find("trainer.zero_stage: must be 0, 1, 2 or 3"),
            std::string::npos);
  EXPECT_FALSE(DataParallel::Create(device.get(), comm->get(), layout, small.tensor(),
                                    small.tensor(), {0, 1024}, {})
                   .ok());
}

}  // namespace
}  // namespace ringmaster::trainer
