// Hyper-parameters of one AdamW update (adamw.h's formula), as the devices (trainer/model's
// AdamWStep) and the CUDA kernels (adamw_cuda.h) take them. Plain data.
#ifndef RINGMASTER_TRAINER_KERNELS_ADAMW_HYPER_H_
#define RINGMASTER_TRAINER_KERNELS_ADAMW_HYPER_H_

#include <cstdint>

namespace ringmaster::kernels {

struct AdamWHyper {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, epsilon = 1e-8f;
  float weight_decay = 0;  // Already 0 for tensors that are not decayed.
  int64_t t = 1;           // 1-based step number, for bias correction.
  float grad_scale = 1;    // Gradients are multiplied by this first (clipping).
};

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ADAMW_HYPER_H_
