// Parity of the CUDA embedding kernels with the CPU reference (embedding.h), fp32 and bf16,
// with many repeated tokens (the deterministic sorted backward pass), either gradient absent,
// accumulating onto existing gradients. Skipped when no GPU is visible.
// Tolerances: fp32 results must be identical to the CPU's: the forward pass is one addition and
// the backward pass adds each token's rows in the same (position) order. bf16: the GPU
// accumulates in fp32 and rounds once, the reference accumulates the same rounded values in
// fp32: one rounding, 4e-3 relative (+1e-6).
#include "trainer/kernels/embedding_cuda.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/cuda/device_scratch.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/embedding.h"

namespace ringmaster::kernels::testing {
namespace {

template <typename T>
class EmbeddingCudaTest : public GpuTypedTest<T> {};
TYPED_TEST_SUITE(EmbeddingCudaTest, ElementTypes);

TYPED_TEST(EmbeddingCudaTest, ForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  const double rtol = sizeof(T) == 2 ? 4e-3 : 0;
  const double atol = sizeof(T) == 2 ? 1e-6 : 0;
  trainer::DeviceScratch scratch(0);
  int seed = 0;
  // (B, T, C, V): a tiny vocabulary (every token repeated many times: runs shorter and longer
  // than the backward's unrolling, longer than its block of 256, and one of exactly two blocks
  // that ends the tokens), GPT-2's shape. Emulated, GPT-2's vocabulary shrinks to 4093 tokens:
  // as with 50304, the 1024 tokens are all distinct (runs of one) and most rows of dwte are
  // untouched. The kernels' work and paths depend on B, T and C, not on V, which only sized the
  // host's 38.6M-element tables (generated, copied and compared six times: most of the emulated
  // test's time).
  const int gpt2_vocab = Emulated() ? 4093 : 50304;
  for (auto [B, Tn, C, V] : {std::tuple{1, 1, 1, 1},
                             {2, 9, 33, 3},
                             {4, 64, 64, 7},
                             {4, 256, 80, 2},
                             {2, 256, 40, 1},
                             {8, 128, 768, gpt2_vocab}}) {
    for (int absent : {0, 1, 2}) {  // 0: both gradients, 1: no dwte, 2: no dwpe
      SCOPED_TRACE(::testing::Message()
                   << "B=" << B << " T=" << Tn << " C=" << C << " V=" << V << " absent=" << absent);
      const int N = B * Tn;
      std::vector<int32_t> tokens(N);
      for (int i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>((i * 2654435761u) % V);
      const std::vector<float> wte = RoundTo<T>(Uniform(int64_t{V} * C, -1, 1, ++seed));
      const std::vector<float> wpe = RoundTo<T>(Uniform(int64_t{Tn} * C, -1, 1, ++seed));
      const std::vector<float> dout = RoundTo<T>(Uniform(int64_t{N} * C, -1, 1, ++seed));
      std::vector<float> dwte = RoundTo<T>(Uniform(int64_t{V} * C, -1, 1, ++seed));
      std::vector<float> dwpe = RoundTo<T>(Uniform(int64_t{Tn} * C, -1, 1, ++seed));
      DeviceBufferOf<int32_t> d_tokens(tokens);
      DeviceArray<T> d_wte(wte), d_wpe(wpe), d_dout(dout), d_out(int64_t{N} * C), d_dwte(dwte),
          d_dwpe(dwpe);

      std::vector<float> out(int64_t{N} * C);
      EmbeddingForwardCpu(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
      ASSERT_TRUE(EmbeddingForwardCuda(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, Tn,
                                       C, nullptr)
                      .ok());
      ExpectClose(d_out.Download(), out, atol, rtol, "out");

      EmbeddingBackwardCpu(absent == 1 ? nullptr : dwte.data(), absent == 2 ? nullptr : dwpe.data(),
                           dout.data(), tokens.data(), B, Tn, C);
      ASSERT_TRUE(EmbeddingBackwardCuda(absent == 1 ? nullptr : d_dwte.get(),
                                        absent == 2 ? nullptr : d_dwpe.get(), d_dout.get(),
                                        d_tokens.get(), B, Tn, C, scratch, nullptr)
                      .ok());
      ExpectClose(d_dwte.Download(), dwte, atol, rtol, "dwte");
      ExpectClose(d_dwpe.Download(), dwpe, atol, rtol, "dwpe");
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
