// The whole model on the CUDA device against the CPU device: a tiny GPT from the same seed,
// its loss and every gradient of one step, then five AdamW steps of training. fp32 (with and
// without cuBLASLt's fused epilogues) and bf16, the latter with 4 heads of 16 channels
// (materialised attention) and with 2 heads of 32 (the fused attention kernels). Skipped when no
// GPU is visible.
// Tolerances (stated, derived rather than measured: no GPU was available when they were set):
//  - fp32: loss within 1e-4, gradients within 1e-3 relative L2 error (every kernel matches its
//    reference to ~1e-5; a step chains ~40 of them), losses over five steps within 1e-3.
//  - bf16: activations, weights and gradients are rounded to 8 significant bits at every
//    step (2^-9 relative each): loss within 3e-2, gradients within 8e-2 relative L2, the
//    five steps' losses within 5e-2. A wrong kernel (a missed term, a wrong index) is off by
//    far more: O(1) relative.
#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/cuda/cuda_device.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/model/cpu_device.h"
#include "trainer/model/gpt.h"
#include "trainer/model/random.h"
#include "trainer/optim/adamw_optimizer.h"

namespace ringmaster::trainer {
namespace {

constexpr int kB = 4, kT = 32;

struct Mode {
  const char* name;
  DType dtype;
  bool fuse;
  int heads;
  double loss_tol, grad_tol, train_tol;
};

const Mode kModes[] = {
    {"f32_fused", DType::kF32, true, 4, 1e-4, 1e-3, 1e-3},
    {"f32_unfused", DType::kF32, false, 4, 1e-4, 1e-3, 1e-3},
    {"bf16_fused", DType::kBF16, true, 4, 3e-2, 8e-2, 5e-2},
    {"bf16_fused_attention", DType::kBF16, true, 2, 3e-2, 8e-2, 5e-2},
};

void Batch(int step, std::vector<int32_t>* in, std::vector<int32_t>* tgt, int vocab) {
  Rng rng(DeriveSeed(11, step));
  for (size_t i = 0; i < in->size(); ++i) {
    (*in)[i] = static_cast<int32_t>(rng.Below(vocab));
    (*tgt)[i] = static_cast<int32_t>(rng.Below(vocab));
  }
}

// All of the model's gradients as host floats.
std::vector<float> Gradients(Device* device, const Gpt& gpt) {
  const Tensor g = gpt.grads();
  std::vector<float> out(g.size);
  if (g.dtype == DType::kF32) {
    EXPECT_TRUE(device->CopyToHost(out.data(), g).ok());
    return out;
  }
  absl::StatusOr<DeviceBuffer> wide = device->Allocate(g.size, DType::kF32);
  EXPECT_TRUE(wide.ok());
  device->Convert(wide->tensor(), g);
  EXPECT_TRUE(device->CopyToHost(out.data(), wide->tensor()).ok());
  return out;
}

double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / norm);
}

class CudaGptParityTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override { RM_SKIP_WITHOUT_GPU(); }
};

TEST_P(CudaGptParityTest, LossGradientsAndTrainingMatchTheCpuDevice) {
  const Mode mode = GetParam();
  const GptConfig config = *GptConfig::Create(2, 64, mode.heads, kT, 101);  // Vp = 128
  const ParameterLayout layout(config, ModelShard::WholeModel(config));
  std::unique_ptr<Device> cpu = MakeCpuDevice(1);
  CudaDeviceOptions options;
  options.compute_dtype = mode.dtype;
  options.fuse_bias = options.fuse_gelu = mode.fuse;
  options.fuse_attention = true;  // taken where the kernels take the shape: bf16, 2 heads
  absl::StatusOr<std::unique_ptr<CudaDevice>> gpu = MakeCudaDevice(0, options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  // The fused kernels keep one fp32 value per row instead of the [B, NH, T, T] probabilities.
  const int64_t probabilities = int64_t{kB} * mode.heads * kT * kT;
  EXPECT_STREQ((*gpu)->AttentionKind(64, mode.heads),
               mode.dtype == DType::kBF16 && mode.heads == 2 ? "fused" : "materialized");
  EXPECT_EQ((*gpu)->AttentionStateSize(kB, kT, 64, mode.heads),
            mode.heads == 2 ? probabilities / kT * 2 : probabilities);

  // Models (and optimizers) before their devices go: declared after them.
  absl::StatusOr<std::unique_ptr<Gpt>> cpu_model = Gpt::Create(cpu.get(), layout, kB, kT);
  absl::StatusOr<std::unique_ptr<Gpt>> gpu_model = Gpt::Create(gpu->get(), layout, kB, kT);
  ASSERT_TRUE(cpu_model.ok() && gpu_model.ok());
  ASSERT_TRUE((*cpu_model)->InitParameters(5).ok());
  ASSERT_TRUE((*gpu_model)->InitParameters(5).ok());

  std::vector<int32_t> in(kB * kT), tgt(kB * kT);
  Batch(0, &in, &tgt, config.vocab);
  absl::StatusOr<double> cpu_loss = (*cpu_model)->Forward(in.data(), tgt.data(), 1.0f);
  absl::StatusOr<double> gpu_loss = (*gpu_model)->Forward(in.data(), tgt.data(), 1.0f);
  ASSERT_TRUE(cpu_loss.ok() && gpu_loss.ok()) << gpu_loss.status();
  EXPECT_NEAR(*gpu_loss, *cpu_loss, mode.loss_tol);
  (*cpu_model)->ZeroGradients();
  (*gpu_model)->ZeroGradients();
  ASSERT_TRUE((*cpu_model)->Backward(nullptr).ok());
  ASSERT_TRUE((*gpu_model)->Backward(nullptr).ok());
  const std::vector<float> cpu_grads = Gradients(cpu.get(), **cpu_model);
  const std::vector<float> gpu_grads = Gradients(gpu->get(), **gpu_model);
  EXPECT_LT(RelativeL2(gpu_grads, cpu_grads), mode.grad_tol);
  // Every tensor's gradient, not just the total (a small tensor could hide in the sum).
  for (const ParamTensor& t : layout.tensors()) {
    const std::vector<float> c(cpu_grads.begin() + t.offset, cpu_grads.begin() + t.offset + t.size);
    const std::vector<float> g(gpu_grads.begin() + t.offset, gpu_grads.begin() + t.offset + t.size);
    EXPECT_LT(RelativeL2(g, c), 2 * mode.grad_tol) << t.name;
  }

  // Five optimizer steps on fresh batches.
  const AdamWConfig adamw{0.9, 0.95, 1e-8, 0.1};
  const std::vector<FlatRange> all = {{0, layout.size()}};
  auto cpu_opt = AdamWOptimizer::Create(cpu.get(), layout, all, (*cpu_model)->params(),
                                        (*cpu_model)->grads(), adamw);
  auto gpu_opt = AdamWOptimizer::Create(gpu->get(), layout, all, (*gpu_model)->params(),
                                        (*gpu_model)->grads(), adamw);
  ASSERT_TRUE(cpu_opt.ok() && gpu_opt.ok());
  for (int step = 1; step <= 5; ++step) {
    Batch(step, &in, &tgt, config.vocab);
    double losses[2];
    int i = 0;
    for (auto [model, opt, device] :
         {std::tuple{cpu_model->get(), cpu_opt->get(), cpu.get()},
          std::tuple{gpu_model->get(), gpu_opt->get(), static_cast<Device*>(gpu->get())}}) {
      model->ZeroGradients();
      absl::StatusOr<double> loss = model->Forward(in.data(), tgt.data(), 1.0f);
      ASSERT_TRUE(loss.ok()) << loss.status();
      ASSERT_TRUE(model->Backward(nullptr).ok());
      opt->Step(1e-2f, step, 1.0f);
      ASSERT_TRUE(device->Synchronize().ok());
      losses[i++] = *loss;
    }
    EXPECT_NEAR(losses[1], losses[0], mode.train_tol) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaGptParityTest, ::testing::ValuesIn(kModes),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ringmaster::trainer
