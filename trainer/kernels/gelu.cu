#include "trainer/kernels/gelu_launch.h"

namespace ringmaster::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int kThreads = 256;

__global__ void GeluForwardKernel(float* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float x = in[i];
    float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(inner));
  }
}

__global__ void GeluBackwardKernel(float* din, const float* in, const float* dout, int64_t n,
                                   bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float x = in[i];
    float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
    float t = tanhf(inner);
    float sech2 = 1.0f - t * t;
    float grad =
        0.5f * (1.0f + t) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    float g = grad * dout[i];
    din[i] = accumulate ? din[i] + g : g;
  }
}

int Blocks(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

cudaError_t LaunchGeluForward(float* out, const float* in, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  GeluForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(out, in, n);
  return cudaGetLastError();
}

cudaError_t LaunchGeluBackward(float* din, const float* in, const float* dout, int64_t n,
                               bool accumulate, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  GeluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(din, in, dout, n, accumulate);
  return cudaGetLastError();
}

}  // namespace ringmaster::kernels
