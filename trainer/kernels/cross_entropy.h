// Fused softmax + cross-entropy over a padded vocabulary, the CPU reference of the device
// operation. logits is [N, Vp]; only the first V columns are real tokens, the padding columns
// get probability 0 (and gradient 0).
#ifndef RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_H_
#define RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_H_

#include <cstdint>

namespace ringmaster::kernels {

// losses[i] = -log softmax(logits[i, :V])[targets[i]]. When dloss != 0, overwrites logits with
// dlogits = (softmax - onehot(target)) * dloss (padding columns 0).
void CrossEntropyCpu(float* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                     float dloss);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_CROSS_ENTROPY_H_
