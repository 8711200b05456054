#include "trainer/kernels/gelu.h"
#include "trainer/kernels/vector_math.h"

namespace ringmaster::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

}  // namespace

// The loops are compiled for AVX-512, AVX2 and baseline x86-64, picked at load time.
__attribute__((target_clones("avx512f", "avx2", "default"))) void GeluForwardCpu(float* out,
                                                                                  const float* in,
                                                                                  int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + TanhFast(inner));
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void GeluBackwardCpu(
    float* din, const float* in, const float* dout, int64_t n, bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float t = TanhFast(inner);
    const float sech2 = 1.0f - t * t;
    const float grad =
        0.5f * (1.0f + t) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    const float g = grad * dout[i];
    din[i] = accumulate ? din[i] + g : g;
  }
}

}  // namespace ringmaster::kernels
