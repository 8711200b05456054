#include "trainer/kernels/embedding.h"

namespace ringmaster::kernels {

__attribute__((target_clones("avx512f", "avx2", "default"))) void EmbeddingForwardCpu(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      float* o = out + (static_cast<long>(b) * T + t) * C;
      const float* e = wte + static_cast<long>(tokens[b * T + t]) * C;
      const float* p = wpe + static_cast<long>(t) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void EmbeddingBackwardCpu(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const float* d = dout + (static_cast<long>(b) * T + t) * C;
      if (dwte != nullptr) {
        float* e = dwte + static_cast<long>(tokens[b * T + t]) * C;
        for (int c = 0; c < C; ++c) e[c] += d[c];
      }
      if (dwpe != nullptr) {
        float* p = dwpe + static_cast<long>(t) * C;
        for (int c = 0; c < C; ++c) p[c] += d[c];
      }
    }
  }
}

}  // namespace ringmaster::kernels
