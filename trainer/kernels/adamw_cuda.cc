#include "trainer/kernels/adamw_cuda.h"

#include <cmath>

#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/adamw_launch.h"

namespace ringmaster::kernels {
namespace {

// As AdamWCpu computes them (pow in double, then float).
AdamWParams Params(const AdamWHyper& h) {
  const auto t = static_cast<double>(h.t);
  const float c1 = 1.0f / (1.0f - static_cast<float>(std::pow(h.beta1, t)));
  const float c2 = 1.0f / (1.0f - static_cast<float>(std::pow(h.beta2, t)));
  return AdamWParams{h.lr, h.beta1, h.beta2, h.epsilon, h.weight_decay, c1, c2, h.grad_scale};
}

}  // namespace

absl::Status AdamWCuda(float* master, float* working, const float* grad, float* m, float* v,
                       int64_t n, const AdamWHyper& h, cudaStream_t stream) {
  return trainer::CudaStatus(LaunchAdamW(master, working, grad, m, v, n, Params(h), stream),
                             "adamw");
}
absl::Status AdamWCuda(float* master, __nv_bfloat16* working, const __nv_bfloat16* grad, float* m,
                       float* v, int64_t n, const AdamWHyper& h, cudaStream_t stream) {
  return trainer::CudaStatus(LaunchAdamW(master, working, grad, m, v, n, Params(h), stream),
                             "adamw");
}

}  // namespace ringmaster::kernels
