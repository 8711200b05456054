#include <cmath>

#include "trainer/kernels/gelu.h"

namespace ringmaster::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

}  // namespace

void GeluForwardCpu(float* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(inner));
  }
}

void GeluBackwardCpu(float* din, const float* in, const float* dout, int64_t n, bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
    float t = std::tanh(inner);
    float sech2 = 1.0f - t * t;
    float grad =
        0.5f * (1.0f + t) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    float g = grad * dout[i];
    din[i] = accumulate ? din[i] + g : g;
  }
}

}  // namespace ringmaster::kernels
