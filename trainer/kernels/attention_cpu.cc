#include <cblas.h>

#include <cmath>

#include "trainer/kernels/attention.h"
#include "trainer/kernels/vector_math.h"

namespace ringmaster::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) void CausalSoftmaxCpu(float* att,
                                                                                   int64_t rows,
                                                                                   int T) {
  for (int64_t row = 0; row < rows; ++row) {
    float* r = att + row * T;
    const int t = static_cast<int>(row % T);
    float max = r[0];
    for (int s = 1; s <= t; ++s) max = r[s] > max ? r[s] : max;
    float sum = 0;
    for (int s = 0; s <= t; ++s) {
      r[s] = ExpFast(r[s] - max);
      sum += r[s];
    }
    const float inv = 1.0f / sum;
    for (int s = 0; s <= t; ++s) r[s] *= inv;
    for (int s = t + 1; s < T; ++s) r[s] = 0.0f;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void CausalSoftmaxBackwardCpu(
    float* datt, const float* att, int64_t rows, int T) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* ar = att + row * T;
    float* dr = datt + row * T;
    const int t = static_cast<int>(row % T);
    float dot = 0;
    for (int s = 0; s <= t; ++s) dot += ar[s] * dr[s];
    for (int s = 0; s <= t; ++s) dr[s] = ar[s] * (dr[s] - dot);
    for (int s = t + 1; s < T; ++s) dr[s] = 0.0f;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void AttentionForwardCpu(
    float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const long row = 3L * C;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + b * T * row + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + (static_cast<long>(b) * NH + h) * T * T;
      // Scores for every (t, s); the entries above the diagonal are masked out below.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, row, k, row, 0.0f,
                  a, T);
      CausalSoftmaxCpu(a, T, T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, row, 0.0f,
                  out + static_cast<long>(b) * T * C + h * hs, C);
    }
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void AttentionBackwardCpu(
    float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const long row = 3L * C;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const long off = b * T * row + h * hs;
      const float* q = qkv + off;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + off;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + (static_cast<long>(b) * NH + h) * T * T;
      float* da = datt + (static_cast<long>(b) * NH + h) * T * T;
      const float* dy = dout + static_cast<long>(b) * T * C + h * hs;
      // datt = dy v^T; dv = att^T dy.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, row, 0.0f,
                  da, T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dy, C, 0.0f, dv,
                  row);
      // Softmax backward in place: dscore = att * (datt - sum(att * datt)); zero above diagonal.
      CausalSoftmaxBackwardCpu(da, a, T, T);
      // dq = dscore k * scale; dk = dscore^T q * scale.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, da, T, k, row, 0.0f,
                  dq, row);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, da, T, q, row, 0.0f,
                  dk, row);
    }
  }
}

}  // namespace ringmaster::kernels
