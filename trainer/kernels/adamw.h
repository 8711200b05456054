// AdamW (decoupled weight decay, bias-corrected moments), the CPU reference of the device
// operation:
//   g = grad * grad_scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   param -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * param)
#ifndef RINGMASTER_TRAINER_KERNELS_ADAMW_H_
#define RINGMASTER_TRAINER_KERNELS_ADAMW_H_

#include <cstdint>

namespace ringmaster::kernels {

void AdamWCpu(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
              float beta1, float beta2, float epsilon, float weight_decay, int64_t t,
              float grad_scale);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ADAMW_H_
