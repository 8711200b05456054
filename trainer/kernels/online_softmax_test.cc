#include "trainer/kernels/online_softmax.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ringmaster::kernels {
namespace {

// The two-pass definition the CPU cross-entropy uses.
void TwoPass(const std::vector<float>& z, float* max, double* sum) {
  *max = z[0];
  for (float x : z) *max = std::max(*max, x);
  *sum = 0;
  for (float x : z) *sum += std::exp(static_cast<double>(x) - *max);
}

TEST(OnlineSoftmaxTest, SequentialFoldMatchesTwoPass) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-30, 30);
  for (int n : {1, 2, 17, 50304}) {
    std::vector<float> z(n);
    for (float& x : z) x = dist(rng);
    SoftmaxState s;
    for (float x : z) s = SoftmaxAdd(s, x);
    float max;
    double sum;
    TwoPass(z, &max, &sum);
    EXPECT_EQ(s.max, max);
    EXPECT_NEAR(s.sum, sum, 5e-4 * sum) << n;
  }
}

TEST(OnlineSoftmaxTest, MergingStridedPartialsMatchesTwoPass) {
  // As the kernel does: thread t folds elements t, t + threads, ...; then a tree of merges.
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0, 5);
  std::vector<float> z(50257);
  for (float& x : z) x = dist(rng);
  for (int threads : {1, 32, 1024, 65536}) {  // 65536 > n: some threads see no element
    std::vector<SoftmaxState> parts(threads);
    for (size_t i = 0; i < z.size(); ++i) parts[i % threads] = SoftmaxAdd(parts[i % threads], z[i]);
    for (int width = 1; width < threads; width *= 2) {
      for (int t = 0; t + width < threads; t += 2 * width) {
        parts[t] = SoftmaxMerge(parts[t], parts[t + width]);
      }
    }
    float max;
    double sum;
    TwoPass(z, &max, &sum);
    EXPECT_EQ(parts[0].max, max);
    EXPECT_NEAR(parts[0].sum, sum, 1e-4 * sum) << threads;
  }
}

TEST(OnlineSoftmaxTest, EmptyStatesMergeWithoutNaN) {
  SoftmaxState empty;
  SoftmaxState both = SoftmaxMerge(empty, empty);
  EXPECT_EQ(both.max, -INFINITY);
  EXPECT_EQ(both.sum, 0.0f);
  SoftmaxState one = SoftmaxAdd(empty, 3.0f);
  EXPECT_EQ(one.max, 3.0f);
  EXPECT_EQ(one.sum, 1.0f);
  SoftmaxState left = SoftmaxMerge(one, empty), right = SoftmaxMerge(empty, one);
  EXPECT_EQ(left.max, 3.0f);
  EXPECT_EQ(left.sum, 1.0f);
  EXPECT_EQ(right.max, 3.0f);
  EXPECT_EQ(right.sum, 1.0f);
}

}  // namespace
}  // namespace ringmaster::kernels
