// CUDA implementations of embedding.h's operations on device pointers, enqueued on `stream`
// (token ids int32 device memory, in [0, vocabulary): the model checks them on the host). The
// backward pass takes its sort space from `scratch` and is deterministic (embedding_launch.h).
#ifndef RINGMASTER_TRAINER_KERNELS_EMBEDDING_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_EMBEDDING_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/cuda/device_scratch.h"

namespace ringmaster::kernels {

absl::Status EmbeddingForwardCuda(float* out, const int32_t* tokens, const float* wte,
                                  const float* wpe, int B, int T, int C, cudaStream_t stream);
absl::Status EmbeddingForwardCuda(__nv_bfloat16* out, const int32_t* tokens,
                                  const __nv_bfloat16* wte, const __nv_bfloat16* wpe, int B, int T,
                                  int C, cudaStream_t stream);

// Accumulates; dwte or dwpe may be null.
absl::Status EmbeddingBackwardCuda(float* dwte, float* dwpe, const float* dout,
                                   const int32_t* tokens, int B, int T, int C,
                                   trainer::DeviceScratch& scratch, cudaStream_t stream);
absl::Status EmbeddingBackwardCuda(__nv_bfloat16* dwte, __nv_bfloat16* dwpe,
                                   const __nv_bfloat16* dout, const int32_t* tokens, int B, int T,
                                   int C, trainer::DeviceScratch& scratch, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_EMBEDDING_CUDA_H_
