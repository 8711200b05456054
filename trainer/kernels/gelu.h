// GELU, tanh approximation (as in GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(s (x + 0.044715 x^3))),  s = sqrt(2/pi).
//
// The CPU functions are the reference every device implementation is tested against
// (gelu_cuda_test.cc). All pointers address `n` floats; `in` and `out` may alias in the forward.
#ifndef RINGMASTER_TRAINER_KERNELS_GELU_H_
#define RINGMASTER_TRAINER_KERNELS_GELU_H_

#include <cstdint>

namespace ringmaster::kernels {

// out[i] = gelu(in[i]).
void GeluForwardCpu(float* out, const float* in, int64_t n);

// din[i] (+)= gelu'(in[i]) * dout[i]; adds into din when `accumulate`, overwrites otherwise.
void GeluBackwardCpu(float* din, const float* in, const float* dout, int64_t n, bool accumulate);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_GELU_H_
