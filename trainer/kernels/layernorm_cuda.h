// CUDA implementations of layernorm.h's operations on device pointers, enqueued on `stream`.
// fp32 statistics; fp32 or bf16 activations and parameters (computed in fp32, rounded once when
// stored). The backward pass takes its scratch from `scratch` and is deterministic.
#ifndef RINGMASTER_TRAINER_KERNELS_LAYERNORM_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_LAYERNORM_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "trainer/cuda/device_scratch.h"

namespace ringmaster::kernels {

// out = LayerNorm(inp (+ residual_b, written to residual)) * weight + bias; see layernorm.h.
absl::Status LayerNormForwardCuda(float* out, float* mean, float* rstd, const float* inp,
                                  const float* residual_b, float* residual, const float* weight,
                                  const float* bias, int N, int C, cudaStream_t stream);
absl::Status LayerNormForwardCuda(__nv_bfloat16* out, float* mean, float* rstd,
                                  const __nv_bfloat16* inp, const __nv_bfloat16* residual_b,
                                  __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                  const __nv_bfloat16* bias, int N, int C, cudaStream_t stream);

// Accumulates dinp, dweight and dbias (may be null).
absl::Status LayerNormBackwardCuda(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, int N, int C, trainer::DeviceScratch& scratch,
                                   cudaStream_t stream);
absl::Status LayerNormBackwardCuda(__nv_bfloat16* dinp, __nv_bfloat16* dweight,
                                   __nv_bfloat16* dbias, const __nv_bfloat16* dout,
                                   const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                   const float* mean, const float* rstd, int N, int C,
                                   trainer::DeviceScratch& scratch, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_LAYERNORM_CUDA_H_
