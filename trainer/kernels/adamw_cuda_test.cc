// Parity of the CUDA AdamW update with the CPU reference (adamw.h) over several steps:
// fp32 gradients with the master as the working copy (no separate copy) and with a separate
// fp32 copy, and bf16 gradients with a bf16 working copy; weight decay on and off; gradient
// scaling (clipping). Skipped when no GPU is visible.
// Tolerances: master weights and moments are fp32 on both sides with the same expression;
// the GPU may contract multiply-adds (FMA), a few ulps per step: 1e-7 + 1e-5 relative. The bf16
// working copy must equal the GPU's own master rounded once (exactly), and the CPU master within
// one bf16 rounding.
#include "trainer/kernels/adamw_cuda.h"

#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/cuda_test_util.h"

namespace ringmaster::kernels::testing {
namespace {

class AdamWCudaTest : public ::testing::Test {
 protected:
  void SetUp() override { RM_SKIP_WITHOUT_GPU(); }
};

enum class Mode { kF32Aliased, kF32Separate, kBF16 };

void RunSteps(Mode mode, int64_t n, float weight_decay, float grad_scale, int steps = 3) {
  SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << " n=" << n
                                    << " wd=" << weight_decay << " scale=" << grad_scale
                                    << " steps=" << steps);
  const bool bf16 = mode == Mode::kBF16;
  std::vector<float> master = Uniform(n, -1, 1, 1), m(n, 0.0f), v(n, 0.0f);
  DeviceArray<float> d_master(master), d_m(n), d_v(n), d_working_f32(n);
  DeviceArray<__nv_bfloat16> d_working_bf16(RoundTo<__nv_bfloat16>(master));
  for (int64_t t = 1; t <= steps; ++t) {
    std::vector<float> grad = Uniform(n, -0.1f, 0.1f, 10 + t);
    if (bf16) grad = RoundTo<__nv_bfloat16>(grad);
    AdamWHyper h;
    h.lr = 1e-2f;
    h.weight_decay = weight_decay;
    h.t = t;
    h.grad_scale = grad_scale;
    AdamWCpu(master.data(), grad.data(), m.data(), v.data(), n, h.lr, h.beta1, h.beta2, h.epsilon,
             h.weight_decay, t, h.grad_scale);
    if (bf16) {
      DeviceArray<__nv_bfloat16> d_grad(grad);
      ASSERT_TRUE(AdamWCuda(d_master.get(), d_working_bf16.get(), d_grad.get(), d_m.get(),
                            d_v.get(), n, h, nullptr)
                      .ok());
    } else {
      DeviceArray<float> d_grad(grad);
      ASSERT_TRUE(AdamWCuda(d_master.get(),
                            mode == Mode::kF32Separate ? d_working_f32.get() : nullptr,
                            d_grad.get(), d_m.get(), d_v.get(), n, h, nullptr)
                      .ok());
    }
    const std::vector<float> got_master = d_master.Download();
    ExpectClose(got_master, master, 1e-7, 1e-5, "master");
    ExpectClose(d_m.Download(), m, 1e-7, 1e-5, "m");
    ExpectClose(d_v.Download(), v, 1e-9, 1e-5, "v");
    if (bf16) {
      const std::vector<float> working = d_working_bf16.Download();
      EXPECT_EQ(working, RoundTo<__nv_bfloat16>(got_master)) << "working = master rounded once";
      ExpectClose(working, master, 1e-6, 4e-3, "working vs cpu master");
    } else if (mode == Mode::kF32Separate) {
      EXPECT_EQ(d_working_f32.Download(), got_master);
    }
  }
}

TEST_F(AdamWCudaTest, MatchesCpuOverSteps) {
  // Beyond the grid cap (65535 blocks of 256 threads) the grid-stride loop runs twice. Emulated,
  // that size takes one step: the later steps' arithmetic is the small sizes' (same kernel, same
  // expression), and three steps of 16.8M elements were most of the emulated pass's time here.
  const int big_steps = Emulated() ? 1 : 3;
  for (Mode mode : {Mode::kF32Aliased, Mode::kF32Separate, Mode::kBF16}) {
    RunSteps(mode, 1, 0.0f, 1.0f);
    RunSteps(mode, 1000, 0.0f, 1.0f);
    RunSteps(mode, int64_t{65535} * 256 + 5, 0.0f, 1.0f, big_steps);
    RunSteps(mode, 4097, 0.1f, 0.5f);
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
