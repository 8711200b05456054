#include <cstring>

#include "trainer/kernels/bf16.h"

namespace ringmaster::kernels {

uint16_t FloatToBf16Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    // NaN: keep the sign and the top of the payload, and set the quiet bit so that a payload
    // living only in the dropped bits cannot turn the NaN into an infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit, then truncate. A carry
  // out of the mantissa correctly bumps the exponent (up to infinity for the largest values).
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16BitsToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &wide, sizeof(x));
  return x;
}

float RoundToBf16(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

void FloatToBf16Cpu(uint16_t* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16Bits(in[i]);
}

void Bf16ToFloatCpu(float* out, const uint16_t* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16BitsToFloat(in[i]);
}

}  // namespace ringmaster::kernels
