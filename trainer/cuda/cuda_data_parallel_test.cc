// Data parallelism on GPUs through NCCL, end to end: the trainer's DataParallel (bucketed
// reductions issued during the backward pass from its communication thread, ordered after the
// compute stream with events; ZeRO-1 reduce-scatter/all-gather in place; ZeRO-2's layer
// window; the loss summed from host memory) with CudaDevice and NcclCommunicator. A tiny GPT
// trained for three steps by one GPU on the whole global batch and by two GPUs on half each
// must end with the same parameters. Needs two GPUs; skipped otherwise.
// Tolerance (fp32, no TF32): 1e-5, as the CPU version of this test (gpt_data_parallel_test.cc):
// the two-rank runs sum the same per-token gradients in another order; a lost, doubled or
// stale bucket would be ~1e-2 off. bf16: the two ranks must hold identical parameters. Against
// the one-GPU run, bf16 gradients summed in another order flip the sign of the smallest ones,
// and AdamW's first steps move a parameter by about the learning rate whatever its gradient's
// size, so a flipped parameter ends up to 2 * lr per step away (0.027 seen under emulation,
// where about 0.3% of the parameters differ by more than lr / 2). So no bound on the largest
// difference can tell a defect from rounding: 2 * lr * steps only catches a divergence (NaN, a
// blow-up). The mean difference is the check: below 1e-3 (1.6e-4 seen; a bf16 all-reduce that
// drops the other rank's gradients makes it 1.4e-2).
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "trainer/comm/testing.h"
#include "trainer/cuda/cuda_device.h"
#include "trainer/cuda/nccl_communicator.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/model/gpt.h"
#include "trainer/model/random.h"
#include "trainer/parallel/data_parallel.h"

namespace ringmaster::trainer {
namespace {

constexpr int kB = 2, kT = 16, kSteps = 3;
constexpr float kLearningRate = 1e-2f;

void Sequence(int step, int seq, int32_t* in, int32_t* tgt) {
  Rng rng(DeriveSeed(step, seq));
  for (int t = 0; t < kT; ++t) {
    in[t] = static_cast<int32_t>(rng.Below(100));
    tgt[t] = static_cast<int32_t>(rng.Below(100));
  }
}

// Trains kSteps on global batch 4 * kB as rank `rank` of `ranks` (GPU `rank`); returns the
// parameters as floats.
absl::StatusOr<std::vector<float>> Train(int rank, int ranks, int zero, DType dtype,
                                         InMemoryStore* store) {
  GptConfig config = *GptConfig::Create(3, 32, 2, kT, 100);
  ParameterLayout layout(config, ModelShard::WholeModel(config));
  CudaDeviceOptions options;
  options.compute_dtype = dtype;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device, MakeCudaDevice(rank, options));
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                   ConnectNccl(absl::StrCat("dp-", zero, "-", ranks), rank, ranks, store,
                               NcclOptionsFor(*device, absl::Seconds(120))));
  const int64_t padded = PaddedSize(layout.size(), ranks);
  ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt,
                   Gpt::Create(device.get(), layout, kB, kT, padded, zero < 2));
  RETURN_IF_ERROR(gpt->InitParameters(7));
  // Small buckets: several reductions per backward pass, overlapping it.
  ASSIGN_OR_RETURN(
      std::unique_ptr<DataParallel> dp,
      DataParallel::Create(device.get(), comm.get(), layout, gpt->params(), gpt->grads(),
                           {zero, 4096}, AdamWConfig{0.9, 0.95, 1e-8, 0.1}));
  gpt->SetGradientSink(dp->sink());
  const int micro_steps = 4 / ranks;
  std::vector<int32_t> in(kB * kT), tgt(kB * kT);
  for (int step = 0; step < kSteps; ++step) {
    gpt->ZeroGradients();
    dp->BeginStep();
    float group_loss = 0;
    for (int m = 0; m < micro_steps; ++m) {
      for (int b = 0; b < kB; ++b) {
        Sequence(step, (m * ranks + rank) * kB + b, &in[b * kT], &tgt[b * kT]);
      }
      ASSIGN_OR_RETURN(double loss,
                       gpt->Forward(in.data(), tgt.data(), 1.0f / (micro_steps * ranks)));
      const bool last = m + 1 == micro_steps;
      if (last) {
        group_loss = static_cast<float>(loss);
        dp->SumAsync(&group_loss);  // host memory through the communication thread
      }
      dp->BeginMicrobatch(last);
      RETURN_IF_ERROR(gpt->Backward([&](int64_t low) { dp->OnGradientsFinal(low); }));
    }
    RETURN_IF_ERROR(dp->FinishReduction());
    if (!(group_loss > 0)) return absl::InternalError("the summed loss did not arrive");
    ASSIGN_OR_RETURN(double norm, dp->GradientNorm());
    const float scale = norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f;
    RETURN_IF_ERROR(dp->Step(kLearningRate, step + 1, scale));
  }
  std::vector<float> params(layout.size());
  ASSIGN_OR_RETURN(DeviceBuffer wide, device->Allocate(layout.size(), DType::kF32));
  device->Convert(wide.tensor(), gpt->params().Slice(0, layout.size()));
  RETURN_IF_ERROR(device->CopyToHost(params.data(), wide.tensor()));
  return params;
}

struct Case {
  int zero;
  DType dtype;
};

class CudaDataParallelTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    RM_SKIP_WITHOUT_GPU();
    if (VisibleCudaDevices() < 2) GTEST_SKIP() << "needs two GPUs";
  }
};

TEST_P(CudaDataParallelTest, TwoGpusMatchOneGpuOnTheSameGlobalBatch) {
  const Case c = GetParam();
  InMemoryStore solo_store;
  absl::StatusOr<std::vector<float>> solo = Train(0, 1, c.zero, c.dtype, &solo_store);
  ASSERT_TRUE(solo.ok()) << solo.status();
  InMemoryStore store;
  std::vector<std::vector<float>> results(2);
  std::vector<absl::Status> statuses = testing::RunRanks(2, [&](int rank) -> absl::Status {
    absl::StatusOr<std::vector<float>> r = Train(rank, 2, c.zero, c.dtype, &store);
    if (!r.ok()) return r.status();
    results[rank] = std::move(*r);
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(results[0], results[1]) << "replicas diverged";
  double worst = 0, sum = 0;
  for (size_t i = 0; i < solo->size(); ++i) {
    const double d = std::fabs(results[0][i] - (*solo)[i]);
    worst = std::max(worst, d);
    sum += d;
  }
  if (c.dtype == DType::kF32) {
    EXPECT_LT(worst, 1e-5) << "largest parameter difference";
  } else {
    EXPECT_LT(worst, 2.0 * kLearningRate * kSteps) << "largest parameter difference: diverged";
    EXPECT_LT(sum / solo->size(), 1e-3) << "mean parameter difference";
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, CudaDataParallelTest,
                         ::testing::Values(Case{0, DType::kF32}, Case{1, DType::kF32},
                                           Case{2, DType::kF32}, Case{0, DType::kBF16},
                                           Case{2, DType::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat("zero", info.param.zero, "_",
                                               DTypeName(info.param.dtype));
                         });

}  // namespace
}  // namespace ringmaster::trainer
