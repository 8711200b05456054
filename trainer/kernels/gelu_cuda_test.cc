// Parity of the CUDA GELU kernels with the CPU reference, fp32 and bf16. Skipped when no GPU is
// visible.
// Tolerances: fp32 |gpu - cpu| <= 1e-6 + 1e-5 |cpu| (tanhf against the CPU's vectorised tanh,
// both fp32). bf16: the reference is given the same bf16-rounded inputs and computes in fp32,
// as the kernel does; the kernel rounds its result once, so the difference is at most half a
// bf16 ulp (2^-9 relative) plus the fp32 difference: 1e-5 + 4e-3 |cpu|.
#include "trainer/kernels/gelu_cuda.h"

#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/gelu.h"

namespace ringmaster::kernels::testing {
namespace {

// The backward's 1 - tanh^2 cancels near |tanh| = 1: the 1-2 ulp between the CPU's TanhFast and
// the GPU's tanhf become up to ~2.5e-6 absolute on gradients with |dout| <= 6 (simulated on CPU
// over this test's inputs), hence fp32's atol 1e-5 rather than fp32 rounding alone.
template <typename T>
constexpr Tol kTol = PerType<T>(Tol{1e-5, 1e-5}, Tol{2e-5, 4e-3});

template <typename T>
class GeluCudaTest : public GpuTypedTest<T> {};
TYPED_TEST_SUITE(GeluCudaTest, ElementTypes);

// 0 (no launch), below/at/above one block, and more than the grid cap (65535 blocks x 256
// threads) so the grid-stride loop runs more than once. Sizes that are whole 16-byte vectors (256,
// 4096, and 5000 below) take the vectorized backward kernel, the others the scalar one.
const int64_t kSizes[] = {0, 1, 255, 256, 257, 4096, 100003, 65535LL * 256 + 4097};

TYPED_TEST(GeluCudaTest, ForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> in = RoundTo<T>(Uniform(n, -6, 6, n + 1));
    const std::vector<float> dout = RoundTo<T>(Uniform(n, -6, 6, n + 2));
    const std::vector<float> prior = RoundTo<T>(Uniform(n, -6, 6, n + 3));
    DeviceArray<T> d_in(in), d_dout(dout), d_out(n), d_din(prior);

    std::vector<float> out(n);
    GeluForwardCpu(out.data(), in.data(), n);
    ASSERT_TRUE(GeluForwardCuda(d_out.get(), d_in.get(), n, nullptr).ok());
    ExpectClose(d_out.Download(), out, kTol<T>.atol, kTol<T>.rtol, "forward");

    // Accumulate into `prior`, then overwrite: both branches.
    std::vector<float> din = prior;
    GeluBackwardCpu(din.data(), in.data(), dout.data(), n, /*accumulate=*/true);
    ASSERT_TRUE(GeluBackwardCuda(d_din.get(), d_in.get(), d_dout.get(), n, true, nullptr).ok());
    ExpectClose(d_din.Download(), din, kTol<T>.atol, kTol<T>.rtol, "backward accumulate");
    GeluBackwardCpu(din.data(), in.data(), dout.data(), n, /*accumulate=*/false);
    ASSERT_TRUE(GeluBackwardCuda(d_din.get(), d_in.get(), d_dout.get(), n, false, nullptr).ok());
    ExpectClose(d_din.Download(), din, kTol<T>.atol, kTol<T>.rtol, "backward overwrite");
  }
}

TYPED_TEST(GeluCudaTest, BackwardInPlaceOverDout) {
  using T = TypeParam;
  const int64_t n = 5000;
  const std::vector<float> in = RoundTo<T>(Uniform(n, -6, 6, 1));
  const std::vector<float> dout = RoundTo<T>(Uniform(n, -6, 6, 2));
  std::vector<float> want(n);
  GeluBackwardCpu(want.data(), in.data(), dout.data(), n, false);
  DeviceArray<T> d_in(in), d_grad(dout);
  // The Device contract: dinp may alias dout.
  ASSERT_TRUE(GeluBackwardCuda(d_grad.get(), d_in.get(), d_grad.get(), n, false, nullptr).ok());
  ExpectClose(d_grad.Download(), want, kTol<T>.atol, kTol<T>.rtol, "in place");
}

}  // namespace
}  // namespace ringmaster::kernels::testing
