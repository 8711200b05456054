#include <cmath>

#include "trainer/kernels/layernorm.h"

namespace ringmaster::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) void LayerNormForwardCpu(
    float* out, float* mean, float* rstd, const float* inp,
                         const float* residual_b, float* residual, const float* weight,
                         const float* bias, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const float* x = inp + static_cast<long>(i) * C;
    if (residual_b != nullptr) {
      const float* b = residual_b + static_cast<long>(i) * C;
      float* r = residual + static_cast<long>(i) * C;
      for (int c = 0; c < C; ++c) r[c] = x[c] + b[c];
      x = r;
    }
    float sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum / C;
    float var = 0;
    for (int c = 0; c < C; ++c) {
      const float d = x[c] - m;
      var += d * d;
    }
    const float s = 1.0f / std::sqrt(var / C + kLayerNormEpsilon);
    float* o = out + static_cast<long>(i) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void LayerNormBackwardCpu(
    float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const float* dy = dout + static_cast<long>(i) * C;
    const float* x = inp + static_cast<long>(i) * C;
    float* dx = dinp + static_cast<long>(i) * C;
    const float m = mean[i];
    const float s = rstd[i];
    // Two reductions: mean of w*dy and mean of w*dy*xhat.
    float dnorm_mean = 0;
    float dnorm_norm_mean = 0;
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float dnorm = weight[c] * dy[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * xhat;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float dnorm = weight[c] * dy[c];
      if (dbias != nullptr) dbias[c] += dy[c];
      dweight[c] += xhat * dy[c];
      dx[c] += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s;
    }
  }
}

}  // namespace ringmaster::kernels
