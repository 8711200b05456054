// Parity of the elementwise CUDA kernels with their CPU references (elementwise.h, bf16.h),
// fp32 and bf16. Skipped when no GPU is visible.
// Tolerances: the operations are a single fp32 operation per element, so fp32 results must be
// identical (0); bf16 results are the fp32 result rounded once to nearest even, which the test
// computes exactly on the host (RoundTo), so they must be identical too. Conversions are
// compared bit for bit, ties, infinities and NaN included.
#include "trainer/kernels/elementwise_cuda.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/bf16.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/elementwise.h"

namespace ringmaster::kernels::testing {
namespace {

template <typename T>
class ElementwiseCudaTest : public GpuTypedTest<T> {};
TYPED_TEST_SUITE(ElementwiseCudaTest, ElementTypes);

const int64_t kSizes[] = {0, 1, 255, 256, 257, 65535LL * 256 + 4097};

TYPED_TEST(ElementwiseCudaTest, AddScaleAndBiasMatchCpuExactly) {
  using T = TypeParam;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> a = RoundTo<T>(Uniform(n, -3, 3, 1));
    const std::vector<float> b = RoundTo<T>(Uniform(n, -3, 3, 2));
    std::vector<float> sum(n);
    AddCpu(sum.data(), a.data(), b.data(), n);
    DeviceArray<T> d_a(a), d_b(b), d_out(n);
    ASSERT_TRUE(AddCuda(d_out.get(), d_a.get(), d_b.get(), n, nullptr).ok());
    EXPECT_EQ(d_out.Download(), RoundTo<T>(sum));
    // out aliasing a.
    ASSERT_TRUE(AddCuda(d_a.get(), d_a.get(), d_b.get(), n, nullptr).ok());
    EXPECT_EQ(d_a.Download(), RoundTo<T>(sum));

    std::vector<float> scaled = b;
    ScaleCpu(scaled.data(), -0.37f, n);
    ASSERT_TRUE(ScaleCuda(d_b.get(), -0.37f, n, nullptr).ok());
    EXPECT_EQ(d_b.Download(), RoundTo<T>(scaled));
  }
  for (auto [rows, cols] : {std::pair{1, 1}, {3, 7}, {64, 768}, {1000, 1}}) {
    const std::vector<float> out = RoundTo<T>(Uniform(int64_t{rows} * cols, -3, 3, rows));
    const std::vector<float> bias = RoundTo<T>(Uniform(cols, -1, 1, cols));
    std::vector<float> want = out;
    AddBiasCpu(want.data(), bias.data(), rows, cols);
    DeviceArray<T> d_out(out), d_bias(bias);
    ASSERT_TRUE(AddBiasCuda(d_out.get(), d_bias.get(), rows, cols, nullptr).ok());
    EXPECT_EQ(d_out.Download(), RoundTo<T>(want)) << rows << "x" << cols;
  }
}

float FromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

TEST(ConvertCudaTest, BitExactWithTheCpuReference) {
  RM_SKIP_WITHOUT_GPU();
  std::vector<float> in = Uniform(100000, -1e5f, 1e5f, 9);
  const float inf = std::numeric_limits<float>::infinity();
  // Ties both ways, signed zero, extremes, infinities, NaNs (one with only low payload bits).
  for (float x : {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -(1.0f + 3.0f / 256),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), inf,
                  -inf, std::numeric_limits<float>::quiet_NaN(), FromBits(0x7f800001u)}) {
    in.push_back(x);
  }
  const int64_t n = in.size();
  DeviceBufferOf<float> d_in(in);
  DeviceArray<__nv_bfloat16> d_bf16(n);
  DeviceArray<float> d_back(n);
  ASSERT_TRUE(ConvertCuda(d_bf16.get(), d_in.get(), n, nullptr).ok());
  ASSERT_TRUE(ConvertCuda(d_back.get(), d_bf16.get(), n, nullptr).ok());
  const std::vector<float> back = d_back.Download();
  for (int64_t i = 0; i < n; ++i) {
    const float want = RoundToBf16(in[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(back[i])) << i;
    } else {
      ASSERT_EQ(back[i], want) << "in " << in[i];
      ASSERT_EQ(std::signbit(back[i]), std::signbit(want)) << "in " << in[i];
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels::testing
