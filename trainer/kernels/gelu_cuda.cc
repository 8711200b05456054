#include "trainer/kernels/gelu_cuda.h"

#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/gelu_launch.h"

namespace ringmaster::kernels {

using trainer::CudaStatus;

absl::Status GeluForwardCuda(float* out, const float* in, int64_t n, cudaStream_t stream) {
  return CudaStatus(LaunchGeluForward(out, in, n, stream), "gelu forward");
}
absl::Status GeluForwardCuda(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t n,
                             cudaStream_t stream) {
  return CudaStatus(LaunchGeluForward(out, in, n, stream), "gelu forward");
}
absl::Status GeluBackwardCuda(float* din, const float* in, const float* dout, int64_t n,
                              bool accumulate, cudaStream_t stream) {
  return CudaStatus(LaunchGeluBackward(din, in, dout, n, accumulate, stream), "gelu backward");
}
absl::Status GeluBackwardCuda(__nv_bfloat16* din, const __nv_bfloat16* in,
                              const __nv_bfloat16* dout, int64_t n, bool accumulate,
                              cudaStream_t stream) {
  return CudaStatus(LaunchGeluBackward(din, in, dout, n, accumulate, stream), "gelu backward");
}

}  // namespace ringmaster::kernels
