#include "trainer/kernels/adamw_launch.h"
#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"

namespace ringmaster::kernels {
namespace {

template <typename G, typename W>
__global__ void AdamWKernel(float* master, W* working, const G* grad, float* m, float* v, int64_t n,
                            AdamWParams p) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    // The CPU reference's expression, term for term.
    const float g = Load(grad + i) * p.grad_scale;
    const float mi = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    const float vi = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float param = master[i];
    param -= p.lr * (mi * p.c1 / (sqrtf(vi * p.c2) + p.epsilon) + p.weight_decay * param);
    master[i] = param;
    if (working != nullptr) Store(working + i, param);
  }
}

template <typename G, typename W>
cudaError_t AdamW(float* master, W* working, const G* grad, float* m, float* v, int64_t n,
                  const AdamWParams& p, cudaStream_t stream) {
  ClearStaleError();
  if (n == 0) return cudaSuccess;
  AdamWKernel<<<GridStrideBlocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
      master, working, grad, m, v, n, p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAdamW(float* master, float* working, const float* grad, float* m, float* v,
                        int64_t n, const AdamWParams& p, cudaStream_t stream) {
  return AdamW(master, working, grad, m, v, n, p, stream);
}
cudaError_t LaunchAdamW(float* master, __nv_bfloat16* working, const __nv_bfloat16* grad, float* m,
                        float* v, int64_t n, const AdamWParams& p, cudaStream_t stream) {
  return AdamW(master, working, grad, m, v, n, p, stream);
}

}  // namespace ringmaster::kernels
