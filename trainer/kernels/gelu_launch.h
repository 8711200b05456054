// Raw kernel launchers for gelu.cu, kept free of Abseil so nvcc compiles only CUDA-plain code.
// Callers use gelu_cuda.h, which turns the returned cudaError_t into a Status. fp32 or bf16
// elements, fp32 arithmetic (tanhf), bf16 results rounded once. In the backward pass din may
// alias dout.
#ifndef RINGMASTER_TRAINER_KERNELS_GELU_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_GELU_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ringmaster::kernels {

cudaError_t LaunchGeluForward(float* out, const float* in, int64_t n, cudaStream_t stream);
cudaError_t LaunchGeluForward(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t n,
                              cudaStream_t stream);
cudaError_t LaunchGeluBackward(float* din, const float* in, const float* dout, int64_t n,
                               bool accumulate, cudaStream_t stream);
cudaError_t LaunchGeluBackward(__nv_bfloat16* din, const __nv_bfloat16* in,
                               const __nv_bfloat16* dout, int64_t n, bool accumulate,
                               cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_GELU_LAUNCH_H_
