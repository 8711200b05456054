// Parity of the fused CUDA softmax + cross-entropy with the CPU reference (cross_entropy.h),
// fp32 and bf16 logits: evaluation only (logits untouched) and with a gradient, padded and
// unpadded vocabularies, targets at both ends, GPT-2's 50257 / 50304. Skipped without a GPU.
// Tolerances:
//  - losses: fp32 on both sides from the same (rounded) logits, the normaliser summed in a
//    different order (one pass vs two): 1e-5 + 1e-5 relative.
//  - dlogits: fp32 1e-9 + 1e-4 relative (exp of the same arguments, different sums); bf16 adds
//    the output rounding: where the two fp32 values straddle a rounding boundary they round one
//    bf16 ulp apart, up to 2^-7 relative just above a power of two: 1e-9 + 8e-3 relative (5e-3
//    failed when the kernel ran emulated on the CPU: 6.2e-3). Padding columns exactly 0.
#include "trainer/kernels/cross_entropy_cuda.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/cuda_test_util.h"

namespace ringmaster::kernels::testing {
namespace {

template <typename T>
class CrossEntropyCudaTest : public GpuTypedTest<T> {};
TYPED_TEST_SUITE(CrossEntropyCudaTest, ElementTypes);

TYPED_TEST(CrossEntropyCudaTest, LossesAndGradientsMatchCpu) {
  using T = TypeParam;
  const double grad_rtol = sizeof(T) == 2 ? 8e-3 : 1e-4;
  int seed = 0;
  for (auto [N, V, Vp] :
       {std::tuple{1, 1, 1}, {3, 5, 8}, {2, 513, 640}, {7, 1000, 1024}, {4, 50257, 50304}}) {
    for (float dloss : {0.0f, 1.0f / 32}) {
      SCOPED_TRACE(::testing::Message()
                   << "N=" << N << " V=" << V << " Vp=" << Vp << " dloss=" << dloss);
      // Wide logits: the max subtraction matters.
      std::vector<float> logits = RoundTo<T>(Uniform(int64_t{N} * Vp, -20, 20, ++seed));
      std::vector<int32_t> targets(N);
      for (int i = 0; i < N; ++i) targets[i] = i == 0 ? 0 : (i == 1 ? V - 1 : (i * 7919) % V);
      DeviceArray<T> d_logits(logits);
      DeviceArray<float> d_losses(N);
      DeviceBufferOf<int32_t> d_targets(targets);
      std::vector<float> want = logits, losses(N);
      CrossEntropyCpu(want.data(), losses.data(), targets.data(), N, V, Vp, dloss);
      ASSERT_TRUE(CrossEntropyCuda(d_logits.get(), d_losses.get(), d_targets.get(), N, V, Vp, dloss,
                                   nullptr)
                      .ok());
      ExpectClose(d_losses.Download(), losses, 1e-5, 1e-5, "losses");
      const std::vector<float> got = d_logits.Download();
      if (dloss == 0.0f) {
        EXPECT_EQ(got, logits) << "evaluation leaves the logits alone";
        continue;
      }
      ExpectClose(got, RoundTo<T>(want), 1e-9, grad_rtol, "dlogits");
      for (int i = 0; i < N; ++i) {
        for (int j = V; j < Vp; ++j) ASSERT_EQ(got[int64_t{i} * Vp + j], 0.0f) << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
