// The CUDA kernels at the model's two ends and in attention (embedding.cu, cross_entropy.cu,
// attention_softmax.cu) run on the CPU (emulated: emu/cuda_emu.h) against their CPU references,
// in fp32 and bf16, with the threads of every block run in both orders. The cases and
// tolerances of embedding_cuda_test.cc and cross_entropy_cuda_test.cc, which need a GPU; the
// softmax kernels' GPU test is attention_cuda_test.cc (through cuBLAS), here they are alone.
#include <cstdint>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/attention.h"
#include "trainer/kernels/attention_launch.h"
#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/cross_entropy_launch.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/embedding.h"
#include "trainer/kernels/embedding_launch.h"
#include "trainer/kernels/emulated_test_util.h"

namespace ringmaster::kernels {
namespace {

using testing::ElementTypes;
using testing::ExpectClose;
using testing::Floats;
using testing::kOrders;
using testing::RoundTo;
using testing::ThreadOrder;
using testing::To;
using testing::Uniform;

template <typename T>
class EmulatedRowsTest : public ::testing::Test {};
TYPED_TEST_SUITE(EmulatedRowsTest, ElementTypes);

// One warp per row, 8 rows a block: rows not filling the last block (whole warps return), rows
// shorter and longer than a warp, several sequences (r % T restarts).
TYPED_TEST(EmulatedRowsTest, CausalSoftmaxForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  const bool bf16 = sizeof(T) == 2;
  // fp32: the host's expf against the CPU's ExpFast, sums in another order. bf16: one rounding
  // of each output (2^-9 relative).
  const double atol = bf16 ? 1e-5 : 1e-6, rtol = bf16 ? 4e-3 : 1e-4;
  int seed = 0;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    for (auto [sequences, T_] : {std::pair{1, 1}, {3, 7}, {2, 33}, {2, 64}, {1, 100}}) {
      SCOPED_TRACE(::testing::Message() << sequences << " x T=" << T_);
      const int64_t rows = int64_t{sequences} * T_;
      const int64_t n = rows * T_;
      const std::vector<float> scores = RoundTo<T>(Uniform(n, -8, 8, ++seed));
      std::vector<float> att = scores;
      CausalSoftmaxCpu(att.data(), rows, T_);
      std::vector<T> t_att = To<T>(scores);
      ASSERT_LAUNCHED(LaunchCausalSoftmax(t_att.data(), rows, T_, nullptr));
      ExpectClose(Floats(t_att), att, atol, rtol, "softmax");

      // The backward from the kernel's own probabilities, so both sides start alike.
      const std::vector<float> probabilities = Floats(t_att);
      std::vector<float> datt = RoundTo<T>(Uniform(n, -1, 1, ++seed));
      std::vector<T> t_datt = To<T>(datt);
      CausalSoftmaxBackwardCpu(datt.data(), probabilities.data(), rows, T_);
      ASSERT_LAUNCHED(LaunchCausalSoftmaxBackward(t_datt.data(), t_att.data(), rows, T_, nullptr));
      ExpectClose(Floats(t_datt), datt, atol, rtol, "softmax backward");
    }
  }
}

// cross_entropy_cuda_test.cc's cases: evaluation (logits untouched) and with a gradient, padded
// and unpadded vocabularies, targets at both ends, GPT-2's 50257 / 50304.
TYPED_TEST(EmulatedRowsTest, CrossEntropyLossesAndGradientsMatchCpu) {
  using T = TypeParam;
  // bf16: where the two fp32 gradients straddle a rounding boundary they round one bf16 ulp
  // apart, up to 2^-7 relative just above a power of two (seen here: 6.2e-3).
  const double grad_rtol = sizeof(T) == 2 ? 8e-3 : 1e-4;
  int seed = 0;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    for (auto [N, V, Vp] :
         {std::tuple{1, 1, 1}, {3, 5, 8}, {2, 513, 640}, {7, 1000, 1024}, {4, 50257, 50304}}) {
      for (float dloss : {0.0f, 1.0f / 32}) {
        SCOPED_TRACE(::testing::Message()
                     << "N=" << N << " V=" << V << " Vp=" << Vp << " dloss=" << dloss);
        const std::vector<float> logits = RoundTo<T>(Uniform(int64_t{N} * Vp, -20, 20, ++seed));
        std::vector<int32_t> targets(N);
        for (int i = 0; i < N; ++i) targets[i] = i == 0 ? 0 : (i == 1 ? V - 1 : (i * 7919) % V);
        std::vector<float> want = logits, losses(N), e_losses(N);
        CrossEntropyCpu(want.data(), losses.data(), targets.data(), N, V, Vp, dloss);
        std::vector<T> t_logits = To<T>(logits);
        ASSERT_LAUNCHED(LaunchCrossEntropy(t_logits.data(), e_losses.data(), targets.data(), N, V,
                                           Vp, dloss, nullptr));
        ExpectClose(e_losses, losses, 1e-5, 1e-5, "losses");
        const std::vector<float> got = Floats(t_logits);
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
}

// embedding_cuda_test.cc's cases: fp32 identical to the CPU (the backward adds each token's rows
// in position order); bf16 one rounding.
TYPED_TEST(EmulatedRowsTest, EmbeddingForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  const double rtol = sizeof(T) == 2 ? 4e-3 : 0;
  const double atol = sizeof(T) == 2 ? 1e-6 : 0;
  int seed = 0;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    // (B, T, C, V): tiny vocabularies (runs of one token shorter and longer than the backward's
    // unrolling, longer than its block of 256, one of exactly two blocks ending the tokens),
    // GPT-2's width over a vocabulary of 4099 (the GPU test's 50304 costs the host too long).
    for (auto [B, Tn, C, V] : {std::tuple{1, 1, 1, 1},
                               {2, 9, 33, 3},
                               {4, 64, 64, 7},
                               {4, 256, 80, 2},
                               {2, 256, 40, 1},
                               {8, 128, 768, 4099}}) {
      for (int absent : {0, 1, 2}) {  // 0: both gradients, 1: no dwte, 2: no dwpe
        SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << Tn << " C=" << C << " V=" << V
                                          << " absent=" << absent);
        const int N = B * Tn;
        std::vector<int32_t> tokens(N);
        for (int i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>((i * 2654435761u) % V);
        const std::vector<float> wte = RoundTo<T>(Uniform(int64_t{V} * C, -1, 1, ++seed));
        const std::vector<float> wpe = RoundTo<T>(Uniform(int64_t{Tn} * C, -1, 1, ++seed));
        const std::vector<float> dout = RoundTo<T>(Uniform(int64_t{N} * C, -1, 1, ++seed));
        std::vector<float> dwte = RoundTo<T>(Uniform(int64_t{V} * C, -1, 1, ++seed));
        std::vector<float> dwpe = RoundTo<T>(Uniform(int64_t{Tn} * C, -1, 1, ++seed));
        std::vector<T> t_wte = To<T>(wte), t_wpe = To<T>(wpe), t_dout = To<T>(dout),
                       t_out(int64_t{N} * C), t_dwte = To<T>(dwte), t_dwpe = To<T>(dwpe);

        std::vector<float> out(int64_t{N} * C);
        EmbeddingForwardCpu(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
        ASSERT_LAUNCHED(LaunchEmbeddingForward(t_out.data(), tokens.data(), t_wte.data(),
                                               t_wpe.data(), B, Tn, C, nullptr));
        ExpectClose(Floats(t_out), out, atol, rtol, "out");

        size_t scratch_bytes = 0;
        ASSERT_EQ(EmbeddingBackwardScratchBytes(N, &scratch_bytes), cudaSuccess);
        std::vector<char> scratch(scratch_bytes);
        EmbeddingBackwardCpu(absent == 1 ? nullptr : dwte.data(),
                             absent == 2 ? nullptr : dwpe.data(), dout.data(), tokens.data(), B, Tn,
                             C);
        ASSERT_LAUNCHED(LaunchEmbeddingBackward(
            absent == 1 ? nullptr : t_dwte.data(), absent == 2 ? nullptr : t_dwpe.data(),
            t_dout.data(), tokens.data(), B, Tn, C, scratch.data(), scratch.size(), nullptr));
        ExpectClose(Floats(t_dwte), dwte, atol, rtol, "dwte");
        ExpectClose(Floats(t_dwpe), dwpe, atol, rtol, "dwpe");
      }
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels
