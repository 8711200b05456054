// The reducing CUDA kernels (reduce.cu, layernorm.cu) run on the CPU (emulated: emu/cuda_emu.h)
// against their CPU references, in fp32 and bf16, with the threads of every block run in both
// orders: block sums through shared memory, warp shuffles, deterministic column sums over row
// slices. The cases and tolerances of reduce_cuda_test.cc and layernorm_cuda_test.cc, which need
// a GPU.
#include <cmath>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/emulated_test_util.h"
#include "trainer/kernels/launch_shape.h"
#include "trainer/kernels/layernorm.h"
#include "trainer/kernels/layernorm_launch.h"
#include "trainer/kernels/reduce.h"
#include "trainer/kernels/reduce_launch.h"

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
class EmulatedReductionTest : public ::testing::Test {};
TYPED_TEST_SUITE(EmulatedReductionTest, ElementTypes);

TYPED_TEST(EmulatedReductionTest, SumSquaresMatchesCpuAndIsDeterministic) {
  using T = TypeParam;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    // Empty, one block, just over one block, many blocks.
    for (int64_t n : {0, 1, 4096, 4097, 300001}) {
      const std::vector<float> x = RoundTo<T>(Uniform(n, -2, 2, n + 7));
      const std::vector<T> tx = To<T>(x);
      std::vector<double> partials(SumSquaresBlocks(n)), result{-1}, again{-2};
      ASSERT_LAUNCHED(LaunchSumSquares(tx.data(), n, partials.data(), result.data(), nullptr));
      const double want = SumSquaresCpu(x.data(), n);
      EXPECT_NEAR(result[0], want, 1e-12 * want) << "n=" << n;
      ASSERT_LAUNCHED(LaunchSumSquares(tx.data(), n, partials.data(), again.data(), nullptr));
      EXPECT_EQ(again[0], result[0]) << "same input, same bits";
    }
  }
}

TYPED_TEST(EmulatedReductionTest, ColumnSumsMatchCpu) {
  using T = TypeParam;
  const bool bf16 = sizeof(T) == 2;
  int seed = 0;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    // Rows within one slice and over several (ColumnReduceSplits); columns around a warp.
    for (int rows : {1, 7, 256, 257, 1500}) {
      for (int cols : {1, 31, 32, 33, 97}) {
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " accumulate=" << accumulate);
          const std::vector<float> in = RoundTo<T>(Uniform(int64_t{rows} * cols, -1, 1, ++seed));
          const std::vector<float> prior = RoundTo<T>(Uniform(cols, -5, 5, ++seed));
          std::vector<float> exact(cols);
          for (int c = 0; c < cols; ++c) {
            double sum = accumulate ? prior[c] : 0.0;
            for (int r = 0; r < rows; ++r) sum += in[int64_t{r} * cols + c];
            exact[c] = static_cast<float>(sum);
          }
          const std::vector<T> tin = To<T>(in);
          std::vector<T> out = To<T>(prior);
          std::vector<float> scratch(ColumnReduceScratch(cols, ColumnReduceSplits(rows)));
          ASSERT_LAUNCHED(LaunchColumnSums(out.data(), tin.data(), rows, cols, accumulate,
                                           scratch.data(), nullptr));
          const double atol = 2e-7 * rows + (accumulate ? 1e-6 : 0);
          ExpectClose(Floats(out), exact, atol, bf16 ? 4e-3 : 1e-6, "column sums");
        }
      }
    }
  }
}

// layernorm_cuda_test.cc's tolerances: sums in another order; bf16 outputs rounded once.
template <typename T>
struct Tol {
  static constexpr double kAtol = sizeof(T) == 2 ? 2e-2 : 1e-5;
  static constexpr double kRtol = sizeof(T) == 2 ? 1e-2 : 1e-4;
};

// (N, C): one row; channels below, at and above a warp; GPT-2's width; more rows than one
// column-reduction slice.
const std::pair<int, int> kShapes[] = {{1, 1}, {3, 31}, {5, 32}, {8, 33}, {64, 768}, {300, 100}};

enum class Residual { kNone, kSeparate, kInPlace };

TYPED_TEST(EmulatedReductionTest, LayerNormForwardMatchesCpu) {
  using T = TypeParam;
  int seed = 0;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    for (auto [N, C] : kShapes) {
      for (Residual mode : {Residual::kNone, Residual::kSeparate, Residual::kInPlace}) {
        SCOPED_TRACE(::testing::Message()
                     << N << "x" << C << " residual " << static_cast<int>(mode));
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
        std::vector<T> t_inp = To<T>(inp), t_other = To<T>(other), t_weight = To<T>(weight),
                       t_bias = To<T>(bias), t_out(n), t_residual(n);
        std::vector<float> e_mean(N), e_rstd(N);
        T* residual = mode == Residual::kSeparate  ? t_residual.data()
                      : mode == Residual::kInPlace ? t_inp.data()
                                                   : nullptr;
        ASSERT_LAUNCHED(
            LaunchLayerNormForward(t_out.data(), e_mean.data(), e_rstd.data(), t_inp.data(),
                                   mode == Residual::kNone ? nullptr : t_other.data(), residual,
                                   t_weight.data(), t_bias.data(), N, C, nullptr));
        ExpectClose(Floats(t_out), out, Tol<T>::kAtol, Tol<T>::kRtol, "out");
        ExpectClose(e_mean, mean, 1e-5, 1e-4, "mean");
        ExpectClose(e_rstd, rstd, 1e-5, 1e-4, "rstd");
        if (mode == Residual::kSeparate) ExpectClose(Floats(t_residual), x, 0, 0, "residual");
        if (mode == Residual::kInPlace) ExpectClose(Floats(t_inp), x, 0, 0, "residual in place");
      }
    }
  }
}

TYPED_TEST(EmulatedReductionTest, LayerNormBackwardAccumulatesLikeCpu) {
  using T = TypeParam;
  int seed = 100;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    for (auto [N, C] : kShapes) {
      for (bool with_dbias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << N << "x" << C << " dbias " << with_dbias);
        const int64_t n = int64_t{N} * C;
        const std::vector<float> inp = RoundTo<T>(Uniform(n, -2, 2, ++seed));
        const std::vector<float> dout = RoundTo<T>(Uniform(n, -1, 1, ++seed));
        const std::vector<float> weight = RoundTo<T>(Uniform(C, 0.5f, 1.5f, ++seed));
        const std::vector<float> bias = RoundTo<T>(Uniform(C, -0.5f, 0.5f, ++seed));
        std::vector<float> out(n), mean(N), rstd(N);
        LayerNormForwardCpu(out.data(), mean.data(), rstd.data(), inp.data(), nullptr, nullptr,
                            weight.data(), bias.data(), N, C);
        // Gradients accumulate onto what is there.
        std::vector<float> dinp = RoundTo<T>(Uniform(n, -1, 1, ++seed));
        std::vector<float> dweight = RoundTo<T>(Uniform(C, -1, 1, ++seed));
        std::vector<float> dbias = RoundTo<T>(Uniform(C, -1, 1, ++seed));
        std::vector<T> t_inp = To<T>(inp), t_dout = To<T>(dout), t_weight = To<T>(weight),
                       t_dinp = To<T>(dinp), t_dweight = To<T>(dweight), t_dbias = To<T>(dbias);
        std::vector<float> scratch(2 * ColumnReduceScratch(C, ColumnReduceSplits(N)));
        LayerNormBackwardCpu(dinp.data(), dweight.data(), with_dbias ? dbias.data() : nullptr,
                             dout.data(), inp.data(), weight.data(), mean.data(), rstd.data(), N,
                             C);
        ASSERT_LAUNCHED(LaunchLayerNormBackward(
            t_dinp.data(), t_dweight.data(), with_dbias ? t_dbias.data() : nullptr, t_dout.data(),
            t_inp.data(), t_weight.data(), mean.data(), rstd.data(), N, C, scratch.data(),
            nullptr));
        ExpectClose(Floats(t_dinp), dinp, Tol<T>::kAtol, Tol<T>::kRtol, "dinp");
        const double sum_atol = Tol<T>::kAtol + 2e-7 * N;
        ExpectClose(Floats(t_dweight), dweight, sum_atol, Tol<T>::kRtol, "dweight");
        // Without a bias gradient, dbias is left as it was.
        ExpectClose(Floats(t_dbias), dbias, sum_atol, Tol<T>::kRtol, "dbias");
      }
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels
