#include "trainer/kernels/adamw_cuda.h"

#include <cmath>

#include "trainer/cuda/cuda_status.h"
#include "trainer/kernels/adamw_launch.h"

namespace ringmaster::kernels {
namespace {

// As AdamWCpu computes them (pow in double, then float).
AdamWParams Params(const AdamWHyper& h) {
  AdamWParams p;
  p.lr = h.lr;
  p.beta1 = h.beta1;
  p.beta2 = h.beta2;
  p.epsilon = h.epsilon;
  p.weight_decay = h.weight_decay;
  p.grad_scale = h.grad_scale;
  p.c1 = 1.0f / (1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(h.t))));
  p.c2 = 1.0f / (1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(h.t))));
  return p;
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
