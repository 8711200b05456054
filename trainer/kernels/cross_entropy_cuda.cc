#include "trainer/kernels/cross_entropy_cuda.h"

#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/cross_entropy_launch.h"

namespace ringmaster::kernels {

absl::Status CrossEntropyCuda(float* logits, float* losses, const int32_t* targets, int N, int V,
                              int Vp, float dloss, cudaStream_t stream) {
  return trainer::CudaStatus(LaunchCrossEntropy(logits, losses, targets, N, V, Vp, dloss, stream),
                             "cross-entropy");
}
absl::Status CrossEntropyCuda(__nv_bfloat16* logits, float* losses, const int32_t* targets, int N,
                              int V, int Vp, float dloss, cudaStream_t stream) {
  return trainer::CudaStatus(LaunchCrossEntropy(logits, losses, targets, N, V, Vp, dloss, stream),
                             "cross-entropy");
}

}  // namespace ringmaster::kernels
