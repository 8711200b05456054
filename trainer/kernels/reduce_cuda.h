// CUDA implementations of reduce.h's reductions on device pointers, enqueued on `stream`, with
// their scratch taken from `scratch` (grown as needed; see trainer/cuda/device_scratch.h).
// Deterministic: the same input gives the same bits on every run.
#ifndef RINGMASTER_TRAINER_KERNELS_REDUCE_CUDA_H_
#define RINGMASTER_TRAINER_KERNELS_REDUCE_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "trainer/cuda/device_scratch.h"

namespace ringmaster::kernels {

// *result (one double of device memory) = sum of squares of x[0, n).
absl::Status SumSquaresCuda(const float* x, int64_t n, double* result,
                            trainer::DeviceScratch& scratch, cudaStream_t stream);
absl::Status SumSquaresCuda(const __nv_bfloat16* x, int64_t n, double* result,
                            trainer::DeviceScratch& scratch, cudaStream_t stream);

// out[c] (+)= column sums of in[rows, cols].
absl::Status ColumnSumsCuda(float* out, const float* in, int rows, int cols, bool accumulate,
                            trainer::DeviceScratch& scratch, cudaStream_t stream);
absl::Status ColumnSumsCuda(__nv_bfloat16* out, const __nv_bfloat16* in, int rows, int cols,
                            bool accumulate, trainer::DeviceScratch& scratch, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_REDUCE_CUDA_H_
