// CUDA implementation of cross_entropy.h's fused softmax + cross-entropy on device pointers,
// enqueued on `stream`. logits fp32 or bf16 (the gradient is written in that type); losses fp32;
// targets int32 (in [0, V): the caller checks them, as the model does on the host).
#ifndef RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace ringmaster::kernels {

absl::Status CrossEntropyCuda(float* logits, float* losses, const int32_t* targets, int N, int V,
                              int Vp, float dloss, cudaStream_t stream);
absl::Status CrossEntropyCuda(__nv_bfloat16* logits, float* losses, const int32_t* targets, int N,
                              int V, int Vp, float dloss, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_CUDA_H_
