// CUDA implementation of gelu.h's functions, on device pointers, enqueued on `stream`; fp32 or
// bf16 elements (bf16 computed in fp32, rounded once). Only built where CUDA is (see
// third_party/cuda/defs.bzl). Errors are returned as Status (trainer/cuda/cuda_status.h), never
// swallowed.
#ifndef RINGMASTER_TRAINER_KERNELS_GELU_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_GELU_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace ringmaster::kernels {

absl::Status GeluForwardCuda(float* out, const float* in, int64_t n, cudaStream_t stream);
absl::Status GeluForwardCuda(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t n,
                             cudaStream_t stream);
absl::Status GeluBackwardCuda(float* din, const float* in, const float* dout, int64_t n,
                              bool accumulate, cudaStream_t stream);
absl::Status GeluBackwardCuda(__nv_bfloat16* din, const __nv_bfloat16* in,
                              const __nv_bfloat16* dout, int64_t n, bool accumulate,
                              cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_GELU_CUDA_H_
