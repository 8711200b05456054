#include <cmath>

#include "trainer/kernels/cross_entropy.h"
#include "trainer/kernels/vector_math.h"

namespace ringmaster::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) void CrossEntropyCpu(
    float* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                     float dloss) {
  for (int i = 0; i < N; ++i) {
    float* z = logits + static_cast<long>(i) * Vp;
    float max = z[0];
    for (int j = 1; j < V; ++j) max = z[j] > max ? z[j] : max;
    float sum = 0;
    for (int j = 0; j < V; ++j) sum += ExpFast(z[j] - max);
    const int target = targets[i];
    const float log_sum = std::log(sum);
    losses[i] = log_sum - (z[target] - max);
    if (dloss == 0.0f) continue;
    const float inv = 1.0f / sum;
    for (int j = 0; j < V; ++j) z[j] = ExpFast(z[j] - max) * inv * dloss;
    z[target] -= dloss;
    for (int j = V; j < Vp; ++j) z[j] = 0.0f;
  }
}

}  // namespace ringmaster::kernels
