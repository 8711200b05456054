// Parity of the CUDA reductions with their CPU references (reduce.h), fp32 and bf16, and their
// determinism. Skipped when no GPU is visible.
// Tolerances:
//  - SumSquares: both compared with an exact (long double) sum: the kernel's tree of double
//    sums within 1e-12 relative; the CPU reference's sequential sum within n * 1.2e-16 (n
//    roundings of 2^-53). Compared with each other at 1e-12, they failed at n = 5,000,000 when
//    the kernel ran emulated on the CPU: the sequential reference was off by 1.4e-12.
//  - ColumnSums: the GPU sums fp32 partials per row slice, the CPU sequentially; both are
//    compared with an exact (double) sum, allowing fp32 rounding over `rows` additions,
//    2e-7 * rows * mean |x| (a loose form of the worst case), plus, for bf16 output, one
//    rounding: 4e-3 relative.
#include "trainer/kernels/reduce_cuda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/cuda/device_scratch.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/reduce.h"

namespace ringmaster::kernels::testing {
namespace {

template <typename T>
class ReduceCudaTest : public GpuTypedTest<T> {};
TYPED_TEST_SUITE(ReduceCudaTest, ElementTypes);

TYPED_TEST(ReduceCudaTest, SumSquaresMatchesCpuAndIsDeterministic) {
  using T = TypeParam;
  trainer::DeviceScratch scratch(0);
  // Empty, one block, just over one block, more blocks than the cap (grid-stride loop).
  for (int64_t n : {0, 1, 4096, 4097, 5000000}) {
    const std::vector<float> x = RoundTo<T>(Uniform(n, -2, 2, n + 7));
    DeviceArray<T> d_x(x);
    DeviceBufferOf<double> result(std::vector<double>{-1});
    ASSERT_TRUE(SumSquaresCuda(d_x.get(), n, result.get(), scratch, nullptr).ok());
    const double got = result.Download()[0];
    // Both against an exact sum: the kernel's tree of double sums is within 1e-12; the CPU
    // reference sums sequentially, about n roundings of 2^-53 (1.4e-12 seen at n = 5,000,000).
    long double exact = 0;
    for (int64_t i = 0; i < n; ++i) exact += static_cast<long double>(x[i]) * x[i];
    const double want = static_cast<double>(exact);
    EXPECT_NEAR(got, want, 1e-12 * want) << "n=" << n;
    EXPECT_NEAR(SumSquaresCpu(x.data(), n), want, std::max(1e-12, n * 1.2e-16) * want);
    ASSERT_TRUE(SumSquaresCuda(d_x.get(), n, result.get(), scratch, nullptr).ok());
    EXPECT_EQ(result.Download()[0], got) << "same input, same bits";
  }
}

TYPED_TEST(ReduceCudaTest, ColumnSumsMatchCpu) {
  using T = TypeParam;
  const bool bf16 = sizeof(T) == 2;
  trainer::DeviceScratch scratch(0);
  int seed = 0;
  for (int rows : {1, 7, 256, 257, 16387}) {
    // 32, 264 and 768 are whole 16-byte vectors in both types (the vectorized kernel; 264 also
    // leaves a block part-filled), the others not.
    for (int cols : {1, 31, 32, 33, 264, 768, 773}) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " accumulate=" << accumulate);
        const std::vector<float> in = RoundTo<T>(Uniform(int64_t{rows} * cols, -1, 1, ++seed));
        const std::vector<float> prior = RoundTo<T>(Uniform(cols, -5, 5, ++seed));
        std::vector<float> cpu = prior;
        ColumnSumsCpu(cpu.data(), in.data(), rows, cols, accumulate);
        std::vector<float> exact(cols);
        for (int c = 0; c < cols; ++c) {
          double sum = accumulate ? prior[c] : 0.0;
          for (int r = 0; r < rows; ++r) sum += in[int64_t{r} * cols + c];
          exact[c] = static_cast<float>(sum);
        }
        DeviceArray<T> d_in(in), d_out(prior);
        ASSERT_TRUE(
            ColumnSumsCuda(d_out.get(), d_in.get(), rows, cols, accumulate, scratch, nullptr).ok());
        const double atol = 2e-7 * rows + (accumulate ? 1e-6 : 0);
        ExpectClose(cpu, exact, atol, 0, "cpu reference");
        ExpectClose(d_out.Download(), exact, atol, bf16 ? 4e-3 : 1e-6, "gpu");
      }
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
