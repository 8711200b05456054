// Parity of the CUDA GELU kernels with the CPU reference. Skipped when no GPU is visible.
// Tolerance: |gpu - cpu| <= 1e-6 + 1e-5 |cpu| (tanhf vs std::tanh, both fp32).
#include "trainer/kernels/gelu_cuda.h"

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/gelu.h"

namespace ringmaster::kernels {
namespace {

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

class GeluCudaTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device visible";
  }
};

float* ToDevice(const std::vector<float>& host) {
  float* dev = nullptr;
  EXPECT_EQ(cudaMalloc(&dev, std::max<size_t>(1, host.size()) * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  return dev;
}

std::vector<float> ToHost(const float* dev, size_t n) {
  std::vector<float> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  int bad = 0;
  for (size_t i = 0; i < cpu.size() && bad < 10; ++i) {
    if (std::fabs(gpu[i] - cpu[i]) > 1e-6f + 1e-5f * std::fabs(cpu[i])) {
      ADD_FAILURE() << "index " << i << ": gpu " << gpu[i] << " cpu " << cpu[i];
      ++bad;
    }
  }
}

TEST_P(GeluCudaTest, ForwardAndBackwardMatchCpu) {
  const int64_t n = GetParam();
  std::mt19937 rng(n);
  std::uniform_real_distribution<float> dist(-6, 6);
  std::vector<float> in(n), dout(n), prior(n);
  for (int64_t i = 0; i < n; ++i) {
    in[i] = dist(rng);
    dout[i] = dist(rng);
    prior[i] = dist(rng);
  }
  float* d_in = ToDevice(in);
  float* d_dout = ToDevice(dout);
  float* d_out = ToDevice(std::vector<float>(n));
  float* d_din = ToDevice(prior);

  std::vector<float> out(n);
  GeluForwardCpu(out.data(), in.data(), n);
  ASSERT_TRUE(GeluForwardCuda(d_out, d_in, n, nullptr).ok());
  ExpectClose(ToHost(d_out, n), out);

  // Accumulate into `prior`, then overwrite: both branches.
  std::vector<float> din = prior;
  GeluBackwardCpu(din.data(), in.data(), dout.data(), n, /*accumulate=*/true);
  ASSERT_TRUE(GeluBackwardCuda(d_din, d_in, d_dout, n, true, nullptr).ok());
  ExpectClose(ToHost(d_din, n), din);
  GeluBackwardCpu(din.data(), in.data(), dout.data(), n, /*accumulate=*/false);
  ASSERT_TRUE(GeluBackwardCuda(d_din, d_in, d_dout, n, false, nullptr).ok());
  ExpectClose(ToHost(d_din, n), din);

  for (float* p : {d_in, d_dout, d_out, d_din}) cudaFree(p);
}

// 0 (no launch), below/at/above one block, and more than the grid cap (65535 blocks x 256
// threads) so the grid-stride loop runs more than once.
INSTANTIATE_TEST_SUITE_P(Sizes, GeluCudaTest,
                         ::testing::Values(0, 1, 255, 256, 257, 100003, 65535LL * 256 + 4097));

}  // namespace
}  // namespace ringmaster::kernels
