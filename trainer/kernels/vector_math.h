// exp and tanh in plain float arithmetic (no libm calls), so that loops over them vectorise:
// the CPU kernels' GELU and softmax spend most of their time here otherwise.
//
// ExpFast: Cephes' expf (range reduction by ln 2 in two parts, degree-6 polynomial), relative
// error below 2e-7 over [-87, 88]; inputs are clamped to that range (exp(-87) ~ 1.6e-38).
// TanhFast: sign(x) (1 - 2 / (exp(2|x|) + 1)), absolute error below 1e-7 (relative error grows
// near 0, where callers add it to 1 as GELU does). Odd by construction: evaluated on -|x|,
// exp(2x) + 1 rounds towards 1 and tanh came out 1 ulp off for x in (-8.7, -2) and exactly -1
// below, which GELU's backward (1 - tanh^2) magnified to 1e-5 against the GPU's tanhf.
#ifndef RINGMASTER_TRAINER_KERNELS_VECTOR_MATH_H_
#define RINGMASTER_TRAINER_KERNELS_VECTOR_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ringmaster::kernels {

inline float ExpFast(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (exact for |x / ln 2| < 2^22).
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r2 + r + 1.0f;
  // e * 2^n, with 2^n built from its exponent bits (n in [-126, 127] after the clamp).
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return e * scale;
}

inline float TanhFast(float x) {
  const float t = 1.0f - 2.0f / (ExpFast(2.0f * std::fabs(x)) + 1.0f);
  return std::copysign(t, x);
}

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_VECTOR_MATH_H_
