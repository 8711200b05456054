// Raw launchers of reduce.cu (reduce.h's reductions), free of Abseil; callers use
// reduce_cuda.h. Both reductions are deterministic: a fixed grid for a given size, fixed
// summation orders, no atomics.
#ifndef RINGMASTER_TRAINER_KERNELS_REDUCE_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_REDUCE_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ringmaster::kernels {

// *result (device memory) = sum of x[i]^2 in double. `partials` holds SumSquaresBlocks(n)
// doubles of scratch (launch_shape.h). Two kernels on `stream`.
cudaError_t LaunchSumSquares(const float* x, int64_t n, double* partials, double* result,
                             cudaStream_t stream);
cudaError_t LaunchSumSquares(const __nv_bfloat16* x, int64_t n, double* partials, double* result,
                             cudaStream_t stream);

// out[c] (+)= sum over rows of in[r, c] (fp32 sums, rounded once into out). `scratch` holds
// ColumnReduceScratch(cols, ColumnReduceSplits(rows)) floats. Two kernels on `stream`.
cudaError_t LaunchColumnSums(float* out, const float* in, int rows, int cols, bool accumulate,
                             float* scratch, cudaStream_t stream);
cudaError_t LaunchColumnSums(__nv_bfloat16* out, const __nv_bfloat16* in, int rows, int cols,
                             bool accumulate, float* scratch, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_REDUCE_LAUNCH_H_
