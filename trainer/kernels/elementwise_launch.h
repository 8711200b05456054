// Raw launchers of elementwise.cu (elementwise.h's operations, plus the fp32 <-> bf16
// conversion of bf16.h), kept free of Abseil so nvcc compiles only CUDA-plain code. Callers use
// elementwise_cuda.h. Each enqueues one kernel on `stream` and returns the launch error.
// Computation is fp32; bf16 results are rounded once, to nearest even.
#ifndef RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ringmaster::kernels {

// out = a + b; out may alias a or b.
cudaError_t LaunchAdd(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
cudaError_t LaunchAdd(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                      cudaStream_t stream);

// x *= factor.
cudaError_t LaunchScale(float* x, float factor, int64_t n, cudaStream_t stream);
cudaError_t LaunchScale(__nv_bfloat16* x, float factor, int64_t n, cudaStream_t stream);

// out[r, c] += bias[c], row-major out[rows, cols].
cudaError_t LaunchAddBias(float* out, const float* bias, int rows, int cols, cudaStream_t stream);
cudaError_t LaunchAddBias(__nv_bfloat16* out, const __nv_bfloat16* bias, int rows, int cols,
                          cudaStream_t stream);

// out[i] = in[i] converted.
cudaError_t LaunchConvert(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream);
cudaError_t LaunchConvert(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_LAUNCH_H_
