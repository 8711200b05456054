#include "trainer/kernels/gemm_test_util.h"

#include <random>

namespace ringmaster::kernels::testing {

void NaiveRowMajorGemm(const RowMajorGemm& g, float alpha, const float* a, const float* b,
                       float beta, float* c) {
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      float sum = 0;
      for (int p = 0; p < g.k; ++p) {
        const float x = g.trans_a ? a[p * g.lda + i] : a[i * g.lda + p];
        const float y = g.trans_b ? b[j * g.ldb + p] : b[p * g.ldb + j];
        sum += x * y;
      }
      float& out = c[i * g.ldc + j];
      out = beta == 0.0f ? alpha * sum : alpha * sum + beta * out;
    }
  }
}

void NaiveColumnMajorGemm(const ColumnMajorGemm& g, float alpha, const float* A, const float* B,
                          float beta, float* C) {
  for (int j = 0; j < g.n; ++j) {
    for (int i = 0; i < g.m; ++i) {
      float sum = 0;
      for (int p = 0; p < g.k; ++p) {
        const float x = g.trans_a ? A[p + i * g.lda] : A[i + p * g.lda];
        const float y = g.trans_b ? B[j + p * g.ldb] : B[p + j * g.ldb];
        sum += x * y;
      }
      float& out = C[i + j * g.ldc];
      out = beta == 0.0f ? alpha * sum : alpha * sum + beta * out;
    }
  }
}

std::vector<float> RandomVector(size_t n, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace ringmaster::kernels::testing
