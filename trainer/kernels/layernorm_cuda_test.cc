// Parity of the CUDA LayerNorm kernels with the CPU reference (layernorm.h), fp32 and bf16:
// plain, fused residual (separate and in place over the input), backward with and without a
// bias gradient, accumulating onto existing gradients. Skipped when no GPU is visible.
// Tolerances:
//  - fp32: 1e-5 + 1e-4 relative (sums in a different order; normalised values are O(1)).
//  - bf16: the reference is given the bf16-rounded inputs and the bf16-rounded residual the
//    kernel normalises; outputs are rounded once (2^-9 relative), statistics stay fp32:
//    2e-2 + 1e-2 relative for values of a few units.
#include "trainer/kernels/layernorm_cuda.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/cuda/device_scratch.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/layernorm.h"

namespace ringmaster::kernels::testing {
namespace {

template <typename T>
constexpr Tol kTol = PerType<T>(Tol{1e-5, 1e-4}, Tol{2e-2, 1e-2});

template <typename T>
class LayerNormCudaTest : public GpuTypedTest<T> {};
TYPED_TEST_SUITE(LayerNormCudaTest, ElementTypes);

// (N, C): one row; channels below, at and above a warp; GPT-2's width; more rows than one
// column-reduction slice. The vectorized kernels (rows of whole 16-byte vectors) in each of their
// variants, 1, 2, 4 and 8 vectors a lane (256 bf16 or 128 fp32 elements per vector a lane):
// bf16 C = 32 and 256, 512, 768, 2048; fp32 C = 32 and 100, 256, 512, 768. The scalar kernels:
// C not a whole number of vectors, and rows too long for the registers (bf16 C = 2304, fp32
// C = 2048 and 2304).
const std::pair<int, int> kShapes[] = {{1, 1},     {3, 31},  {5, 32},  {8, 33},   {64, 768},
                                       {300, 100}, {6, 256}, {9, 512}, {4, 2048}, {3, 2304}};

enum class Residual { kNone, kSeparate, kInPlace };

TYPED_TEST(LayerNormCudaTest, ForwardMatchesCpu) {
  using T = TypeParam;
  int seed = 0;
  for (auto [N, C] : kShapes) {
    for (Residual mode : {Residual::kNone, Residual::kSeparate, Residual::kInPlace}) {
      SCOPED_TRACE(::testing::Message() << N << "x" << C << " residual " << static_cast<int>(mode));
      const int64_t n = int64_t{N} * C;
      const std::vector<float> inp = RoundTo<T>(Uniform(n, -2, 2, ++seed));
      const std::vector<float> other = RoundTo<T>(Uniform(n, -2, 2, ++seed));
      const std::vector<float> weight = RoundTo<T>(Uniform(C, 0.5f, 1.5f, ++seed));
      const std::vector<float> bias = RoundTo<T>(Uniform(C, -0.5f, 0.5f, ++seed));
      // What the kernel normalises: the input, or the residual sum as stored in T.
      std::vector<float> x = inp;
      if (mode != Residual::kNone) {
        for (int64_t i = 0; i < n; ++i) x[i] = inp[i] + other[i];
        x = RoundTo<T>(x);
      }
      std::vector<float> out(n), mean(N), rstd(N);
      LayerNormForwardCpu(out.data(), mean.data(), rstd.data(), x.data(), nullptr, nullptr,
                          weight.data(), bias.data(), N, C);

      DeviceArray<T> d_inp(inp), d_other(other), d_weight(weight), d_bias(bias), d_out(n),
          d_residual(n);
      DeviceArray<float> d_mean(N), d_rstd(N);
      T* residual = mode == Residual::kSeparate  ? d_residual.get()
                    : mode == Residual::kInPlace ? d_inp.get()
                                                 : nullptr;
      ASSERT_TRUE(LayerNormForwardCuda(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(),
                                       mode == Residual::kNone ? nullptr : d_other.get(), residual,
                                       d_weight.get(), d_bias.get(), N, C, nullptr)
                      .ok());
      ExpectClose(d_out.Download(), out, kTol<T>.atol, kTol<T>.rtol, "out");
      ExpectClose(d_mean.Download(), mean, 1e-5, 1e-4, "mean");
      ExpectClose(d_rstd.Download(), rstd, 1e-5, 1e-4, "rstd");
      if (mode == Residual::kSeparate) ExpectClose(d_residual.Download(), x, 0, 0, "residual");
      if (mode == Residual::kInPlace) ExpectClose(d_inp.Download(), x, 0, 0, "residual in place");
    }
  }
}

TYPED_TEST(LayerNormCudaTest, BackwardAccumulatesLikeCpu) {
  using T = TypeParam;
  trainer::DeviceScratch scratch(0);
  int seed = 100;
  for (auto [N, C] : kShapes) {
    for (bool with_dbias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << N << "x" << C << " dbias " << with_dbias);
      const int64_t n = int64_t{N} * C;
      const std::vector<float> inp = RoundTo<T>(Uniform(n, -2, 2, ++seed));
      const std::vector<float> dout = RoundTo<T>(Uniform(n, -1, 1, ++seed));
      const std::vector<float> weight = RoundTo<T>(Uniform(C, 0.5f, 1.5f, ++seed));
      const std::vector<float> bias = RoundTo<T>(Uniform(C, -0.5f, 0.5f, ++seed));
      // Statistics from the forward pass (fp32 on both sides).
      std::vector<float> out(n), mean(N), rstd(N);
      LayerNormForwardCpu(out.data(), mean.data(), rstd.data(), inp.data(), nullptr, nullptr,
                          weight.data(), bias.data(), N, C);
      // Gradients accumulate onto what is there.
      std::vector<float> dinp = RoundTo<T>(Uniform(n, -1, 1, ++seed));
      std::vector<float> dweight = RoundTo<T>(Uniform(C, -1, 1, ++seed));
      std::vector<float> dbias = RoundTo<T>(Uniform(C, -1, 1, ++seed));
      DeviceArray<T> d_inp(inp), d_dout(dout), d_weight(weight), d_dinp(dinp), d_dweight(dweight),
          d_dbias(dbias);
      DeviceArray<float> d_mean(mean), d_rstd(rstd);
      LayerNormBackwardCpu(dinp.data(), dweight.data(), with_dbias ? dbias.data() : nullptr,
                           dout.data(), inp.data(), weight.data(), mean.data(), rstd.data(), N, C);
      ASSERT_TRUE(LayerNormBackwardCuda(d_dinp.get(), d_dweight.get(),
                                        with_dbias ? d_dbias.get() : nullptr, d_dout.get(),
                                        d_inp.get(), d_weight.get(), d_mean.get(), d_rstd.get(), N,
                                        C, scratch, nullptr)
                      .ok());
      ExpectClose(d_dinp.Download(), dinp, kTol<T>.atol, kTol<T>.rtol, "dinp");
      // Sums over N rows: allow fp32 rounding growing with N.
      const double sum_atol = kTol<T>.atol + 2e-7 * N;
      ExpectClose(d_dweight.Download(), dweight, sum_atol, kTol<T>.rtol, "dweight");
      // Without a bias gradient, dbias is left as it was.
      ExpectClose(d_dbias.Download(), dbias, sum_atol, kTol<T>.rtol, "dbias");
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
