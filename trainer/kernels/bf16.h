// bfloat16 on the host: the CPU reference of the CUDA device's fp32 <-> bf16 conversions.
//
// bf16 keeps fp32's sign and 8 exponent bits and the top 7 mantissa bits. fp32 -> bf16 rounds to
// nearest, ties to even (as __float2bfloat16_rn does on the GPU); infinities stay infinities,
// finite values too large for bf16 round to infinity, and NaN stays a (quiet) NaN of the same
// sign. bf16 -> fp32 is exact. A value rounded once is a fixed point: RoundToBf16(RoundToBf16(x))
// == RoundToBf16(x).
#ifndef RINGMASTER_TRAINER_KERNELS_BF16_H_
#define RINGMASTER_TRAINER_KERNELS_BF16_H_

#include <cstdint>

namespace ringmaster::kernels {

uint16_t FloatToBf16Bits(float x);
float Bf16BitsToFloat(uint16_t bits);
// x rounded to the nearest bf16 value, as a float.
float RoundToBf16(float x);

// Array forms: out[i] = conversion of in[i] for i < n.
void FloatToBf16Cpu(uint16_t* out, const float* in, int64_t n);
void Bf16ToFloatCpu(float* out, const uint16_t* in, int64_t n);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_BF16_H_
