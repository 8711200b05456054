// Parity of CUDA attention with the CPU reference (attention.h), forward and backward:
//  - materialised (cuBLAS strided batches + the softmax kernels), fp32 and bf16, for shapes that
//    batch over heads (NH >= B) and over rows (B > NH), T = 1, and T not a multiple of the warp
//    size;
//  - fused (flash_attention.cu), bf16, head sizes 32 and 64, T from 1 to several 64-row tiles,
//    whole and partial (T = 100, 130), B and NH above 1.
// Skipped when no GPU is visible.
// Tolerances:
//  - fp32: 1e-5 + 1e-4 relative (GEMM summation orders differ from OpenBLAS; no TF32).
//  - bf16: the reference gets bf16-rounded qkv (and dout) but computes everything in fp32,
//    while the GPU rounds to bf16 between steps: the materialised path the scores, the
//    probabilities and the outputs; the fused one the probabilities and score gradients that
//    enter the tensor-core products, and the outputs (each a 2^-9 relative rounding; a score
//    error e changes a probability by about e relative). With inputs in [-1, 1] the values are
//    O(1): 3e-2 + 3e-2 relative.
#include "trainer/kernels/attention_cuda.h"

#include <cublas_v2.h>

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/cuda_test_util.h"

namespace ringmaster::kernels::testing {
namespace {

template <typename T>
constexpr Tol kTol = PerType<T>(Tol{1e-5, 1e-4}, Tol{3e-2, 3e-2});

template <typename T>
class AttentionCudaTest : public CublasTypedTest<T> {};
TYPED_TEST_SUITE(AttentionCudaTest, ElementTypes);

// Runs one implementation on one shape and compares out (and att, when materialised) and dqkv
// with the CPU reference. Outputs start as garbage: everything must be overwritten.
template <typename T>
void ExpectMatchesCpu(cublasHandle_t cublas, AttentionImpl impl, int B, int Tn, int C, int NH,
                      int seed, float range = 1) {
  SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << Tn << " C=" << C << " NH=" << NH
                                    << " inputs in +-" << range);
  const int64_t nqkv = int64_t{B} * Tn * 3 * C, natt = int64_t{B} * NH * Tn * Tn;
  const int64_t nout = int64_t{B} * Tn * C;
  const int64_t nstate = AttentionStateElements(impl, kElementType<T>, B, Tn, NH);
  const std::vector<float> qkv = RoundTo<T>(Uniform(nqkv, -range, range, seed));
  const std::vector<float> dout = RoundTo<T>(Uniform(nout, -1, 1, seed + 1));
  std::vector<float> out(nout), att(natt), dqkv(nqkv), datt(natt);
  AttentionForwardCpu(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
  AttentionBackwardCpu(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, NH);

  DeviceArray<T> d_qkv(qkv), d_dout(dout), d_out(Uniform(nout, 5, 6, 1)),
      d_att(Uniform(nstate, 5, 6, 2)), d_dqkv(Uniform(nqkv, 5, 6, 3)), d_datt(nstate);
  ASSERT_TRUE(AttentionForwardCuda(impl, cublas, kElementType<T>, d_out.get(), d_att.get(),
                                   d_qkv.get(), B, Tn, C, NH, nullptr)
                  .ok());
  if (impl == AttentionImpl::kMaterialized) {
    ExpectClose(d_att.Download(), att, kTol<T>.atol, kTol<T>.rtol, "att");
  }
  ExpectClose(d_out.Download(), out, kTol<T>.atol, kTol<T>.rtol, "out");
  ASSERT_TRUE(AttentionBackwardCuda(impl, cublas, kElementType<T>, d_dqkv.get(), d_datt.get(),
                                    d_dout.get(), d_out.get(), d_qkv.get(), d_att.get(), B, Tn, C,
                                    NH, nullptr)
                  .ok());
  const std::vector<float> first = d_dqkv.Download();
  ExpectClose(first, dqkv, kTol<T>.atol, kTol<T>.rtol, "dqkv");
  // Deterministic: the same inputs give the same bits again.
  ASSERT_TRUE(AttentionBackwardCuda(impl, cublas, kElementType<T>, d_dqkv.get(), d_datt.get(),
                                    d_dout.get(), d_out.get(), d_qkv.get(), d_att.get(), B, Tn, C,
                                    NH, nullptr)
                  .ok());
  EXPECT_EQ(d_dqkv.Download(), first);
}

TYPED_TEST(AttentionCudaTest, MaterialisedForwardAndBackwardMatchCpu) {
  int seed = 0;
  for (auto [B, Tn, C, NH] : {std::tuple{1, 1, 8, 2},
                              {2, 5, 12, 3},
                              {4, 7, 16, 2},
                              {2, 64, 64, 4},
                              {3, 100, 96, 2},
                              {1, 256, 128, 2},
                              // Every variant of the vectorized softmax (vectors a lane: T / 256
                              // in bf16, T / 128 in fp32, rounded up to 1, 2, 4 or 8): T = 64
                              // and 256 (1 and 1 / 2), 512 (2 / 4), GPT-2's 1024 (4 / 8), 2048 (8
                              // in bf16; too long for fp32's registers: the scalar kernels).
                              {1, 512, 16, 1},
                              {1, 1024, 16, 1},
                              {1, 2048, 16, 1}}) {
    ExpectMatchesCpu<TypeParam>(this->cublas_, AttentionImpl::kMaterialized, B, Tn, C, NH,
                                seed += 2);
  }
}

class FusedAttentionTest : public CublasTypedTest<__nv_bfloat16> {};

TEST_F(FusedAttentionTest, ForwardAndBackwardMatchCpu) {
  int seed = 100;
  // Head sizes 64 (GPT-2's) and 32; one row; a partial tile; whole tiles; several tiles with a
  // partial last one; batches and heads side by side.
  for (auto [B, Tn, C, NH] : {std::tuple{1, 1, 64, 1},
                              {1, 5, 64, 1},
                              {1, 64, 128, 2},
                              {2, 100, 64, 1},
                              {1, 130, 64, 2},
                              {2, 70, 96, 3},
                              {1, 192, 32, 1},
                              {2, 256, 128, 2},
                              {1, 1024, 64, 1}}) {  // GPT-2's T and head size
    ASSERT_EQ(ChooseAttention(ElementType::kBF16, C, NH, true), AttentionImpl::kFused);
    ExpectMatchesCpu<__nv_bfloat16>(cublas_, AttentionImpl::kFused, B, Tn, C, NH, seed += 2);
  }
}

// Inputs in [-3, 3]: scores up to about 9 * 64 / 8 = 72, peaked rows, and a running maximum that
// moves by far more than the bf16 rounding from one key tile to the next (the online softmax's
// rescaling). The errors grow with the values; the same relative tolerance.
TEST_F(FusedAttentionTest, LargeScoresMatchCpu) {
  int seed = 200;
  for (auto [B, Tn, C, NH] : {std::tuple{2, 130, 64, 2}, {1, 256, 64, 1}}) {
    ExpectMatchesCpu<__nv_bfloat16>(cublas_, AttentionImpl::kFused, B, Tn, C, NH, seed += 2, 3);
  }
}

TEST(ChooseAttentionTest, FusedOnlyForBf16HeadsOf32Or64WhenAllowed) {
  EXPECT_EQ(ChooseAttention(ElementType::kBF16, 768, 12, true), AttentionImpl::kFused);
  EXPECT_EQ(ChooseAttention(ElementType::kBF16, 768, 24, true), AttentionImpl::kFused);
  EXPECT_EQ(ChooseAttention(ElementType::kBF16, 768, 12, false), AttentionImpl::kMaterialized);
  EXPECT_EQ(ChooseAttention(ElementType::kF32, 768, 12, true), AttentionImpl::kMaterialized);
  EXPECT_EQ(ChooseAttention(ElementType::kBF16, 768, 6, true), AttentionImpl::kMaterialized);
  EXPECT_EQ(ChooseAttention(ElementType::kBF16, 100, 3, true), AttentionImpl::kMaterialized);
  // The fused state: B*NH*T fp32 values, whole 16 bytes, in elements of the type.
  EXPECT_EQ(AttentionStateElements(AttentionImpl::kFused, ElementType::kBF16, 2, 3, 1), 16);
  EXPECT_EQ(AttentionStateElements(AttentionImpl::kFused, ElementType::kBF16, 2, 4, 2), 32);
  EXPECT_EQ(AttentionStateElements(AttentionImpl::kMaterialized, ElementType::kBF16, 2, 3, 4), 72);
}

TEST_F(FusedAttentionTest, RefusesFp32AndMisalignedTensors) {
  const int B = 1, Tn = 8, C = 64, NH = 1;
  DeviceArray<float> qkv(B * Tn * 3 * C), out(B * Tn * C), lse(B * NH * Tn);
  EXPECT_EQ(AttentionForwardCuda(AttentionImpl::kFused, cublas_, ElementType::kF32, out.get(),
                                 lse.get(), qkv.get(), B, Tn, C, NH, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  DeviceArray<__nv_bfloat16> qkv16(B * Tn * 3 * C + 1), out16(B * Tn * C),
      lse16(2 * B * NH * Tn + 1);
  EXPECT_FALSE(AttentionForwardCuda(AttentionImpl::kFused, cublas_, ElementType::kBF16, out16.get(),
                                    lse.get(), qkv16.get() + 1, B, Tn, C, NH, nullptr)
                   .ok());
  // The fp32 state carved at an odd bf16 offset.
  EXPECT_FALSE(AttentionForwardCuda(AttentionImpl::kFused, cublas_, ElementType::kBF16, out16.get(),
                                    lse16.get() + 1, qkv16.get(), B, Tn, C, NH, nullptr)
                   .ok());
  EXPECT_TRUE(AttentionForwardCuda(AttentionImpl::kFused, cublas_, ElementType::kBF16, out16.get(),
                                   lse16.get(), qkv16.get(), B, Tn, C, NH, nullptr)
                  .ok());
}

}  // namespace
}  // namespace ringmaster::kernels::testing
