#include "trainer/kernels/embedding_cuda.h"

#include "common/status.h"
#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/embedding_launch.h"

namespace ringmaster::kernels {
namespace {

using trainer::CudaStatus;

template <typename T>
absl::Status Backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int T_, int C,
                      trainer::DeviceScratch& scratch, cudaStream_t stream) {
  size_t bytes = 0;
  RETURN_IF_ERROR(
      CudaStatus(EmbeddingBackwardScratchBytes(B * T_, &bytes), "embedding backward scratch"));
  ASSIGN_OR_RETURN(void* space, scratch.Get(bytes, stream));
  return CudaStatus(
      LaunchEmbeddingBackward(dwte, dwpe, dout, tokens, B, T_, C, space, bytes, stream),
      "embedding backward");
}

}  // namespace

absl::Status EmbeddingForwardCuda(float* out, const int32_t* tokens, const float* wte,
                                  const float* wpe, int B, int T, int C, cudaStream_t stream) {
  return CudaStatus(LaunchEmbeddingForward(out, tokens, wte, wpe, B, T, C, stream),
                    "embedding forward");
}
absl::Status EmbeddingForwardCuda(__nv_bfloat16* out, const int32_t* tokens,
                                  const __nv_bfloat16* wte, const __nv_bfloat16* wpe, int B, int T,
                                  int C, cudaStream_t stream) {
  return CudaStatus(LaunchEmbeddingForward(out, tokens, wte, wpe, B, T, C, stream),
                    "embedding forward");
}
absl::Status EmbeddingBackwardCuda(float* dwte, float* dwpe, const float* dout,
                                   const int32_t* tokens, int B, int T, int C,
                                   trainer::DeviceScratch& scratch, cudaStream_t stream) {
  return Backward(dwte, dwpe, dout, tokens, B, T, C, scratch, stream);
}
absl::Status EmbeddingBackwardCuda(__nv_bfloat16* dwte, __nv_bfloat16* dwpe,
                                   const __nv_bfloat16* dout, const int32_t* tokens, int B, int T,
                                   int C, trainer::DeviceScratch& scratch, cudaStream_t stream) {
  return Backward(dwte, dwpe, dout, tokens, B, T, C, scratch, stream);
}

}  // namespace ringmaster::kernels
