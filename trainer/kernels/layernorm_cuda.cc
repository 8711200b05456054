#include "trainer/kernels/layernorm_cuda.h"

#include "common/status.h"
#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/launch_shape.h"
#include "trainer/kernels/layernorm_launch.h"

namespace ringmaster::kernels {
namespace {

using trainer::CudaStatus;

template <typename T>
absl::Status Backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                      const float* mean, const float* rstd, int N, int C,
                      trainer::DeviceScratch& scratch, cudaStream_t stream) {
  const int64_t floats = 2 * ColumnReduceScratch(C, ColumnReduceSplits(N));
  ASSIGN_OR_RETURN(void* partials, scratch.Get(sizeof(float) * floats, stream));
  return CudaStatus(LaunchLayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N,
                                            C, static_cast<float*>(partials), stream),
                    "layernorm backward");
}

}  // namespace

absl::Status LayerNormForwardCuda(float* out, float* mean, float* rstd, const float* inp,
                                  const float* residual_b, float* residual, const float* weight,
                                  const float* bias, int N, int C, cudaStream_t stream) {
  return CudaStatus(LaunchLayerNormForward(out, mean, rstd, inp, residual_b, residual, weight, bias,
                                           N, C, stream),
                    "layernorm forward");
}
absl::Status LayerNormForwardCuda(__nv_bfloat16* out, float* mean, float* rstd,
                                  const __nv_bfloat16* inp, const __nv_bfloat16* residual_b,
                                  __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                  const __nv_bfloat16* bias, int N, int C, cudaStream_t stream) {
  return CudaStatus(LaunchLayerNormForward(out, mean, rstd, inp, residual_b, residual, weight, bias,
                                           N, C, stream),
                    "layernorm forward");
}
absl::Status LayerNormBackwardCuda(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, int N, int C, trainer::DeviceScratch& scratch,
                                   cudaStream_t stream) {
  return Backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch, stream);
}
absl::Status LayerNormBackwardCuda(__nv_bfloat16* dinp, __nv_bfloat16* dweight,
                                   __nv_bfloat16* dbias, const __nv_bfloat16* dout,
                                   const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                   const float* mean, const float* rstd, int N, int C,
                                   trainer::DeviceScratch& scratch, cudaStream_t stream) {
  return Backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch, stream);
}

}  // namespace ringmaster::kernels
