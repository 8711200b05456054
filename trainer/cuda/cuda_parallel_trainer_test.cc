// Every parallel layout on GPUs through NCCL, against one GPU: ParallelTrainer on CudaDevice
// with an NCCL communicator for every group (tensor-parallel all-reduces of device activations,
// pipeline sends and receives, the data-parallel bucket reductions from the communication
// thread, ZeRO's gathers, the tied embedding's sync, the loss and norm from host memory), as the
// trainer runs it on a GPU node (the same groups; the world group, on Gloo there, is not used by
// ParallelTrainer). The ranks are threads, one GPU each: the layouts need 2, 4 or 8 GPUs and are
// skipped with fewer. Under --config=emu (testing/cuda_emu) they run on the CPU with 8
// emulated GPUs.
//
// fp32 (no TF32): every rank reports the same loss curve, and it follows the one-GPU curve
// within 1e-5 relative, as in the CPU version of this test (parallel_trainer_test.cc: the
// layouts add the same terms in other orders; a missing all-reduce, a doubled gradient or a
// stage fed the wrong microbatch moves the loss by 1e-3 or more within a step or two). bf16:
// every rank agrees, and the curve stays within 2e-3 relative of the one-GPU bf16 curve: the
// layouts round other partial sums to bf16 (8 significant bits), which the loss, a mean over
// every token, mostly averages out (1.1e-4 seen under emulation, whose kernels round as the
// GPU's do); a bf16 all-reduce that drops a rank moves it by 1.2e-2 or more. One bf16 layout
// runs the fused attention kernels (2 heads of 32 channels, one per tensor-parallel rank)
// against one GPU running them too.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "trainer/comm/testing.h"
#include "trainer/cuda/cuda_device.h"
#include "trainer/cuda/nccl_communicator.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/parallel/layout_test_data.h"
#include "trainer/parallel/parallel_groups.h"
#include "trainer/parallel/parallel_trainer.h"

namespace ringmaster::trainer {
namespace {

constexpr int kSteps = 5;
constexpr int kMicroBatch = 2;
constexpr int kGlobalBatch = 16;
constexpr int kSeq = testing::kLayoutTestSeq;

struct Layout {
  int tp = 1, pp = 1, dp = 1, zero = 0;
  DType dtype = DType::kF32;
  // The fused attention kernels, on a model whose heads have 32 channels (bf16 only).
  bool fused = false;
  int world() const { return tp * pp * dp; }
  std::string name() const {
    return absl::StrCat("TP=", tp, " PP=", pp, " DP=", dp, " ZeRO-", zero, " ", DTypeName(dtype),
                        fused ? " fused attention" : "");
  }
};

// Trains kSteps as every rank of `layout` (rank r on GPU r); returns each rank's losses.
std::vector<std::vector<double>> Train(const Layout& layout) {
  const int world = layout.world();
  InMemoryStore store;
  std::vector<std::vector<double>> losses(world);
  std::vector<absl::Status> statuses = testing::RunRanks(world, [&](int rank) -> absl::Status {
    const RankPlace place = RankPlace::Of(rank, layout.tp, layout.pp, layout.dp);
    CudaDeviceOptions device_options;
    device_options.compute_dtype = layout.dtype;
    device_options.fuse_attention = layout.fused;
    ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device, MakeCudaDevice(rank, device_options));
    const GptConfig model = layout.fused
                                ? *GptConfig::Create(4, 64, 2, kSeq, testing::kLayoutTestVocab)
                                : testing::LayoutTestModel();
    // Each rank's heads (tensor parallelism splits them) keep their 32 channels.
    if (layout.fused && std::string(device->AttentionKind(model.d_model / layout.tp,
                                                          model.heads / layout.tp)) != "fused") {
      return absl::InternalError("the fused attention kernels were not taken");
    }
    ASSIGN_OR_RETURN(ParallelGroups groups,
                     ConnectParallelGroups(place, [&](const std::string& name, int r, int n) {
                       return ConnectNccl(name, r, n, &store,
                                          NcclOptionsFor(*device, absl::Seconds(120)));
                     }));
    ParallelTrainerOptions o;
    o.model = model;
    o.place = place;
    o.micro_batch = kMicroBatch;
    o.microbatches = kGlobalBatch / (kMicroBatch * layout.dp);
    o.zero_stage = layout.zero;
    o.bucket_bytes = 8192;  // several buckets per backward pass
    o.adamw = AdamWConfig{0.9, 0.95, 1e-8, 0.1};
    o.clip_grad_norm = 1.0;
    ASSIGN_OR_RETURN(std::unique_ptr<ParallelTrainer> trainer,
                     ParallelTrainer::Create(device.get(), o, &groups));
    RETURN_IF_ERROR(trainer->InitParameters(7));
    for (int step = 0; step < kSteps; ++step) {
      auto fill = [&](int micro, int32_t* in, int32_t* tgt) {
        for (int b = 0; b < kMicroBatch; ++b) {
          const int64_t g = int64_t{step} * kGlobalBatch + micro * (kMicroBatch * layout.dp) +
                            place.dp_rank * kMicroBatch + b;
          testing::LayoutTestSample(g, in + b * kSeq, tgt + b * kSeq);
        }
      };
      ASSIGN_OR_RETURN(StepStats stats, trainer->Step(fill, 3e-3f, step + 1));
      losses[rank].push_back(stats.loss);
    }
    return absl::OkStatus();  // the trainer, then the groups, then the device whose stream they use
  });
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_TRUE(statuses[rank].ok()) << layout.name() << " rank " << rank << ": " << statuses[rank];
  }
  return losses;
}

class CudaParallelTrainerTest : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    RM_SKIP_WITHOUT_GPU();
    if (VisibleCudaDevices() < GetParam().world()) {
      GTEST_SKIP() << "needs " << GetParam().world() << " GPUs";
    }
  }
};

// The one-GPU run of `layout`'s element type and attention, trained once per test program: the
// layouts of each kind compare with the same run (it is deterministic), which otherwise took
// half of this test's time, again for every layout. A failed run is not kept (each test that
// needs it runs it again and reports its failure).
std::vector<double> OneGpuLosses(const Layout& layout) {
  static auto* runs = new std::map<std::pair<DType, bool>, std::vector<double>>;
  const std::pair<DType, bool> key{layout.dtype, layout.fused};
  if (auto it = runs->find(key); it != runs->end()) return it->second;
  Layout solo;
  solo.dtype = layout.dtype;
  solo.fused = layout.fused;
  std::vector<double> losses = Train(solo)[0];
  if (!::testing::Test::HasFailure()) (*runs)[key] = losses;
  return losses;
}

TEST_P(CudaParallelTrainerTest, MatchesOneGpu) {
  const Layout layout = GetParam();
  const std::vector<double> want = OneGpuLosses(layout);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  const std::vector<std::vector<double>> got = Train(layout);
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), static_cast<size_t>(kSteps)) << "rank " << r;
    EXPECT_EQ(got[r], got[0]) << "rank " << r << " reports another loss";
  }
  const double tolerance = layout.dtype == DType::kF32 ? 1e-5 : 2e-3;
  double worst = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double rel = std::abs(got[0][i] - want[i]) / std::abs(want[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, tolerance) << "step " << i + 1 << ": " << got[0][i] << " vs " << want[i];
  }
  EXPECT_LT(want.back(), want.front()) << "the one-GPU run does not learn";
  std::printf("%-36s loss %.6f -> %.6f, largest relative difference %.2e\n", layout.name().c_str(),
              got[0].front(), got[0].back(), worst);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CudaParallelTrainerTest,
    ::testing::Values(Layout{2, 1, 1, 0}, Layout{1, 2, 1, 0}, Layout{2, 2, 1, 0},
                      Layout{1, 1, 2, 1}, Layout{2, 1, 2, 3}, Layout{2, 2, 2, 2},
                      Layout{2, 2, 1, 0, DType::kBF16}, Layout{2, 1, 2, 1, DType::kBF16},
                      Layout{2, 2, 1, 0, DType::kBF16, true}),
    [](const ::testing::TestParamInfo<Layout>& info) {
      const Layout& l = info.param;
      return absl::StrCat("tp", l.tp, "_pp", l.pp, "_dp", l.dp, "_zero", l.zero, "_",
                          DTypeName(l.dtype), l.fused ? "_fused" : "");
    });

}  // namespace
}  // namespace ringmaster::trainer
