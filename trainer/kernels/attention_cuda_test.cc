// Parity of CUDA attention (cuBLAS strided batches + the softmax kernels) with the CPU
// reference (attention.h), fp32 and bf16, forward and backward, for shapes that batch over
// heads (NH >= B) and over rows (B > NH), T = 1, and T not a multiple of the warp size.
// Skipped when no GPU is visible.
// Tolerances:
//  - fp32: 1e-5 + 1e-4 relative (GEMM summation orders differ from OpenBLAS; no TF32).
//  - bf16: the reference gets bf16-rounded qkv (and dout) but computes everything in fp32,
//    while the GPU stores the scores, the probabilities and the outputs in bf16 between steps
//    (each a 2^-9 relative rounding; a score error e changes a probability by about e
//    relative). With inputs in [-1, 1] the values are O(1): 3e-2 + 3e-2 relative.
#include "trainer/kernels/attention_cuda.h"

#include <cublas_v2.h>

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/cuda_test_util.h"

namespace ringmaster::kernels {
namespace {

using testing::CublasTypedTest;
using testing::DeviceArray;
using testing::ElementTypes;
using testing::ExpectClose;
using testing::RoundTo;
using testing::Uniform;

template <typename T>
struct Traits;
template <>
struct Traits<float> {
  static constexpr ElementType kType = ElementType::kF32;
  static constexpr double kAtol = 1e-5, kRtol = 1e-4;
};
template <>
struct Traits<__nv_bfloat16> {
  static constexpr ElementType kType = ElementType::kBF16;
  static constexpr double kAtol = 3e-2, kRtol = 3e-2;
};

template <typename T>
class AttentionCudaTest : public CublasTypedTest<T> {};
TYPED_TEST_SUITE(AttentionCudaTest, ElementTypes);

TYPED_TEST(AttentionCudaTest, ForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  using Tr = Traits<T>;
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
    SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << Tn << " C=" << C << " NH=" << NH);
    const int64_t nqkv = int64_t{B} * Tn * 3 * C, natt = int64_t{B} * NH * Tn * Tn;
    const int64_t nout = int64_t{B} * Tn * C;
    const std::vector<float> qkv = RoundTo<T>(Uniform(nqkv, -1, 1, ++seed));
    const std::vector<float> dout = RoundTo<T>(Uniform(nout, -1, 1, ++seed));
    std::vector<float> out(nout), att(natt), dqkv(nqkv), datt(natt);
    AttentionForwardCpu(out.data(), att.data(), qkv.data(), B, Tn, C, NH);
    AttentionBackwardCpu(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, Tn, C,
                         NH);

    // Outputs start as garbage: everything must be overwritten (att above the diagonal too).
    DeviceArray<T> d_qkv(qkv), d_dout(dout), d_out(Uniform(nout, 5, 6, 1)),
        d_att(Uniform(natt, 5, 6, 2)), d_dqkv(Uniform(nqkv, 5, 6, 3)), d_datt(natt);
    ASSERT_TRUE(AttentionForwardCuda(this->cublas_, Tr::kType, d_out.get(), d_att.get(),
                                     d_qkv.get(), B, Tn, C, NH, nullptr)
                    .ok());
    ExpectClose(d_att.Download(), att, Tr::kAtol, Tr::kRtol, "att");
    ExpectClose(d_out.Download(), out, Tr::kAtol, Tr::kRtol, "out");
    ASSERT_TRUE(AttentionBackwardCuda(this->cublas_, Tr::kType, d_dqkv.get(), d_datt.get(),
                                      d_dout.get(), d_qkv.get(), d_att.get(), B, Tn, C, NH, nullptr)
                    .ok());
    ExpectClose(d_dqkv.Download(), dqkv, Tr::kAtol, Tr::kRtol, "dqkv");
  }
}

}  // namespace
}  // namespace ringmaster::kernels
