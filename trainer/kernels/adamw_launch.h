// Raw launcher of adamw.cu (adamw.h's update), free of Abseil; callers use adamw_cuda.h.
// master, m, v are fp32; grad and the optional working copy are the compute type. The bias
// corrections c1 = 1 / (1 - beta1^t), c2 = 1 / (1 - beta2^t) come from the host, computed as
// the CPU reference computes them.
#ifndef RINGMASTER_TRAINER_KERNELS_ADAMW_LAUNCH_H_
#define RINGMASTER_TRAINER_KERNELS_ADAMW_LAUNCH_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ringmaster::kernels {

struct AdamWParams {
  float lr, beta1, beta2, epsilon, weight_decay, c1, c2, grad_scale;
};

// Updates master, m, v over n elements; working (may be null) receives the new weights rounded
// to its type.
cudaError_t LaunchAdamW(float* master, float* working, const float* grad, float* m, float* v,
                        int64_t n, const AdamWParams& p, cudaStream_t stream);
cudaError_t LaunchAdamW(float* master, __nv_bfloat16* working, const __nv_bfloat16* grad, float* m,
                        float* v, int64_t n, const AdamWParams& p, cudaStream_t stream);

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_ADAMW_LAUNCH_H_
