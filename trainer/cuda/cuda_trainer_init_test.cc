// The trainer's order of construction on a GPU: the optimizer is created with the model, before
// InitParameters writes the weights, so its fp32 masters (a separate copy beside the bf16
// working weights) must be reset from the initialised weights. Checked through an AdamW step at
// learning rate 0 without weight decay: it writes bf16(master) back to every working weight,
// which must then be exactly the weights as initialised (masters left at the allocation's zeros
// would zero the model). Needs a GPU; skipped otherwise.
#include <vector>

#include "gtest/gtest.h"
#include "trainer/comm/testing.h"
#include "trainer/cuda/cuda_device.h"
#include "trainer/cuda/nccl_communicator.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/parallel/parallel_groups.h"
#include "trainer/parallel/parallel_trainer.h"

namespace ringmaster::trainer {
namespace {

constexpr int kMicroBatch = 2, kSeq = 16;

std::vector<float> HeldParameters(CudaDevice& device, const ParallelTrainer& trainer) {
  const Tensor held = trainer.held_parameters();
  absl::StatusOr<DeviceBuffer> wide = device.Allocate(held.size, DType::kF32);
  EXPECT_TRUE(wide.ok()) << wide.status();
  if (!wide.ok()) return {};
  device.Convert(wide->tensor(), held);
  std::vector<float> out(held.size);
  EXPECT_TRUE(device.CopyToHost(out.data(), wide->tensor()).ok());
  return out;
}

TEST(CudaTrainerInitTest, OptimizerMastersStartFromTheInitialisedWeights) {
  RM_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = MakeCudaDevice(0);  // bf16
  ASSERT_TRUE(device.ok()) << device.status();
  InMemoryStore store;
  const RankPlace place = RankPlace::Of(0, 1, 1, 1);
  absl::StatusOr<ParallelGroups> groups =
      ConnectParallelGroups(place, [&](const std::string& name, int rank, int size) {
        return ConnectNccl(name, rank, size, &store, NcclOptionsFor(**device, absl::Seconds(60)));
      });
  ASSERT_TRUE(groups.ok()) << groups.status();
  ParallelTrainerOptions o;
  o.model = *GptConfig::Create(2, 32, 2, kSeq, 100);
  o.place = place;
  o.micro_batch = kMicroBatch;
  o.microbatches = 1;
  o.adamw = AdamWConfig{0.9, 0.95, 1e-8, /*weight_decay=*/0.0};
  absl::StatusOr<std::unique_ptr<ParallelTrainer>> trainer =
      ParallelTrainer::Create(device->get(), o, &*groups);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->InitParameters(7).ok());
  const std::vector<float> initialised = HeldParameters(**device, **trainer);
  ASSERT_FALSE(initialised.empty());

  auto fill = [](int, int32_t* in, int32_t* tgt) {
    for (int i = 0; i < kMicroBatch * kSeq; ++i) {
      in[i] = i % 100;
      tgt[i] = (i * 7 + 1) % 100;
    }
  };
  absl::StatusOr<StepStats> stats = (*trainer)->Step(fill, /*lr=*/0.0f, /*t=*/1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT(stats->loss, 0);
  EXPECT_EQ(HeldParameters(**device, **trainer), initialised);
}

}  // namespace
}  // namespace ringmaster::trainer
