// Causal multi-head attention on the GPU (attention.h's operations): attention_schedule.h's
// steps with cuBLAS strided-batched GEMMs (fp32 accumulation) and attention_softmax.cu's
// kernels. Tensors are device memory of `type`; work is enqueued on `stream` (set on `cublas`
// for the call). The probabilities `att` [B, NH, T, T] are materialised (and kept for the
// backward pass) in the element type, as the Device interface asks.
#ifndef RINGMASTER_TRAINER_KERNELS_ATTENTION_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_ATTENTION_CUDA_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "trainer/kernels/gemm_plan.h"

namespace ringmaster::kernels {

// out and att overwritten.
absl::Status AttentionForwardCuda(cublasHandle_t cublas, ElementType type, void* out, void* att,
                                  const void* qkv, int B, int T, int C, int NH,
                                  cudaStream_t stream);

// dqkv overwritten; datt is scratch of att's size.
absl::Status AttentionBackwardCuda(cublasHandle_t cublas, ElementType type, void* dqkv, void* datt,
                                   const void* dout, const void* qkv, const void* att, int B, int T,
                                   int C, int NH, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ATTENTION_CUDA_H_
