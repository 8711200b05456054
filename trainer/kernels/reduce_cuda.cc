#include "trainer/kernels/reduce_cuda.h"

#include "common/status.h"
#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/launch_shape.h"
#include "trainer/kernels/reduce_launch.h"

namespace ringmaster::kernels {
namespace {

using trainer::CudaStatus;

template <typename T>
absl::Status SumSquares(const T* x, int64_t n, double* result, trainer::DeviceScratch& scratch,
                        cudaStream_t stream) {
  ASSIGN_OR_RETURN(void* partials, scratch.Get(sizeof(double) * SumSquaresBlocks(n), stream));
  return CudaStatus(LaunchSumSquares(x, n, static_cast<double*>(partials), result, stream),
                    "sum of squares");
}

template <typename T>
absl::Status ColumnSums(T* out, const T* in, int rows, int cols, bool accumulate,
                        trainer::DeviceScratch& scratch, cudaStream_t stream) {
  const int64_t floats = ColumnReduceScratch(cols, ColumnReduceSplits(rows));
  ASSIGN_OR_RETURN(void* partials, scratch.Get(sizeof(float) * floats, stream));
  return CudaStatus(
      LaunchColumnSums(out, in, rows, cols, accumulate, static_cast<float*>(partials), stream),
      "column sums");
}

}  // namespace

absl::Status SumSquaresCuda(const float* x, int64_t n, double* result,
                            trainer::DeviceScratch& scratch, cudaStream_t stream) {
  return SumSquares(x, n, result, scratch, stream);
}
absl::Status SumSquaresCuda(const __nv_bfloat16* x, int64_t n, double* result,
                            trainer::DeviceScratch& scratch, cudaStream_t stream) {
  return SumSquares(x, n, result, scratch, stream);
}
absl::Status ColumnSumsCuda(float* out, const float* in, int rows, int cols, bool accumulate,
                            trainer::DeviceScratch& scratch, cudaStream_t stream) {
  return ColumnSums(out, in, rows, cols, accumulate, scratch, stream);
}
absl::Status ColumnSumsCuda(__nv_bfloat16* out, const __nv_bfloat16* in, int rows, int cols,
                            bool accumulate, trainer::DeviceScratch& scratch, cudaStream_t stream) {
  return ColumnSums(out, in, rows, cols, accumulate, scratch, stream);
}

}  // namespace ringmaster::kernels
