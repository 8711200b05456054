#include "trainer/kernels/elementwise_cuda.h"

#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/elementwise_launch.h"

namespace ringmaster::kernels {

using trainer::CudaStatus;

absl::Status AddCuda(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  return CudaStatus(LaunchAdd(out, a, b, n, stream), "add");
}
absl::Status AddCuda(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                     cudaStream_t stream) {
  return CudaStatus(LaunchAdd(out, a, b, n, stream), "add");
}
absl::Status ScaleCuda(float* x, float factor, int64_t n, cudaStream_t stream) {
  return CudaStatus(LaunchScale(x, factor, n, stream), "scale");
}
absl::Status ScaleCuda(__nv_bfloat16* x, float factor, int64_t n, cudaStream_t stream) {
  return CudaStatus(LaunchScale(x, factor, n, stream), "scale");
}
absl::Status AddBiasCuda(float* out, const float* bias, int rows, int cols, cudaStream_t stream) {
  return CudaStatus(LaunchAddBias(out, bias, rows, cols, stream), "bias add");
}
absl::Status AddBiasCuda(__nv_bfloat16* out, const __nv_bfloat16* bias, int rows, int cols,
                         cudaStream_t stream) {
  return CudaStatus(LaunchAddBias(out, bias, rows, cols, stream), "bias add");
}
absl::Status ConvertCuda(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream) {
  return CudaStatus(LaunchConvert(out, in, n, stream), "convert f32 -> bf16");
}
absl::Status ConvertCuda(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  return CudaStatus(LaunchConvert(out, in, n, stream), "convert bf16 -> f32");
}

}  // namespace ringmaster::kernels
