#include <cmath>

#include "trainer/kernels/adamw.h"

namespace ringmaster::kernels {

// Compiled for AVX-512, AVX2 and baseline x86-64, picked at load time.
__attribute__((target_clones("avx512f", "avx2", "default"))) void AdamWCpu(
    float* param, const float* grad, float* m, float* v, int64_t n, float lr,
    float beta1, float beta2, float epsilon, float weight_decay, int64_t t, float grad_scale) {
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(beta1, static_cast<double>(t))));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(beta2, static_cast<double>(t))));
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi * c1 / (std::sqrt(vi * c2) + epsilon) + weight_decay * param[i]);
  }
}

}  // namespace ringmaster::kernels
