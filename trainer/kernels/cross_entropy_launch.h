// Raw launcher of cross_entropy.cu (cross_entropy.h's fused softmax + cross-entropy over a
// padded vocabulary), free of Abseil; callers use cross_entropy_cuda.h. One block per row; the
// softmax normaliser is computed in one pass (online_softmax.h) in fp32.
#ifndef RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ringmaster::kernels {

// losses[i] (fp32) = -log softmax(logits[i, :V])[targets[i]]; when dloss != 0 logits are
// overwritten with (softmax - onehot(target)) * dloss, padding columns [V, Vp) with 0.
cudaError_t LaunchCrossEntropy(float* logits, float* losses, const int32_t* targets, int N, int V,
                               int Vp, float dloss, cudaStream_t stream);
cudaError_t LaunchCrossEntropy(__nv_bfloat16* logits, float* losses, const int32_t* targets, int N,
                               int V, int Vp, float dloss, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_LAUNCH_H_
