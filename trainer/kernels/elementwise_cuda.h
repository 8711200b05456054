// CUDA implementations of elementwise.h's operations and of bf16.h's conversions, on device
// pointers, enqueued on `stream`. bf16 overloads compute in fp32 and round once when storing.
// Errors (launch failures) are returned as Status (cuda_status.h); errors of the kernels
// themselves surface at the stream's next synchronisation.
#ifndef RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace ringmaster::kernels {

absl::Status AddCuda(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
absl::Status AddCuda(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                     cudaStream_t stream);
absl::Status ScaleCuda(float* x, float factor, int64_t n, cudaStream_t stream);
absl::Status ScaleCuda(__nv_bfloat16* x, float factor, int64_t n, cudaStream_t stream);
absl::Status AddBiasCuda(float* out, const float* bias, int rows, int cols, cudaStream_t stream);
absl::Status AddBiasCuda(__nv_bfloat16* out, const __nv_bfloat16* bias, int rows, int cols,
                         cudaStream_t stream);
absl::Status ConvertCuda(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream);
absl::Status ConvertCuda(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ELEMENTWISE_CUDA_H_
