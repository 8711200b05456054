#include "trainer/kernels/gelu.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ringmaster::kernels {
namespace {

double GeluDouble(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(GeluCpuTest, KnownValues) {
  std::vector<float> in = {0.0f, 1.0f, -1.0f, 10.0f, -10.0f};
  std::vector<float> out(in.size());
  GeluForwardCpu(out.data(), in.data(), in.size());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 0.841192f, 1e-5);
  EXPECT_NEAR(out[2], -0.158808f, 1e-5);
  EXPECT_NEAR(out[3], 10.0f, 1e-5);
  EXPECT_NEAR(out[4], 0.0f, 1e-5);
}

TEST(GeluCpuTest, ForwardInPlace) {
  std::vector<float> x = {0.5f, -0.5f};
  GeluForwardCpu(x.data(), x.data(), x.size());
  EXPECT_NEAR(x[0], GeluDouble(0.5), 1e-6);
  EXPECT_NEAR(x[1], GeluDouble(-0.5), 1e-6);
}

TEST(GeluCpuTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4, 4);
  const int n = 200;
  std::vector<float> in(n), dout(n), din(n);
  for (int i = 0; i < n; ++i) {
    in[i] = dist(rng);
    dout[i] = dist(rng);
  }
  GeluBackwardCpu(din.data(), in.data(), dout.data(), n, /*accumulate=*/false);
  for (int i = 0; i < n; ++i) {
    const double h = 1e-4;
    double numeric = (GeluDouble(in[i] + h) - GeluDouble(in[i] - h)) / (2 * h) * dout[i];
    EXPECT_NEAR(din[i], numeric, 1e-4 * (1 + std::fabs(numeric))) << "x=" << in[i];
  }
}

TEST(GeluCpuTest, BackwardAccumulatesOrOverwrites) {
  std::vector<float> in = {0.3f, -2.0f}, dout = {1.0f, 2.0f};
  std::vector<float> fresh(2), acc = {10.0f, -10.0f};
  GeluBackwardCpu(fresh.data(), in.data(), dout.data(), 2, false);
  GeluBackwardCpu(acc.data(), in.data(), dout.data(), 2, true);
  EXPECT_FLOAT_EQ(acc[0], 10.0f + fresh[0]);
  EXPECT_FLOAT_EQ(acc[1], -10.0f + fresh[1]);
  std::vector<float> over = {10.0f, -10.0f};
  GeluBackwardCpu(over.data(), in.data(), dout.data(), 2, false);
  EXPECT_EQ(over, fresh);
}

}  // namespace
}  // namespace ringmaster::kernels
