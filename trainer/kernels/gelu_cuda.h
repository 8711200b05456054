// CUDA implementation of gelu.h's functions, on device pointers, enqueued on `stream`.
// Only built where CUDA is (see third_party/cuda/defs.bzl). Errors are returned as Status
// (INTERNAL with the CUDA error string), never swallowed.
#ifndef RINGMASTER_TRAINER_KERNELS_GELU_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_GELU_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace ringmaster::kernels {

absl::Status GeluForwardCuda(float* out, const float* in, int64_t n, cudaStream_t stream);
absl::Status GeluBackwardCuda(float* din, const float* in, const float* dout, int64_t n,
                              bool accumulate, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_GELU_CUDA_H_
