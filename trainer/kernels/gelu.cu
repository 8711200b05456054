#include "trainer/kernels/gelu_launch.h"
#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"

namespace ringmaster::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

template <typename T>
__global__ void GeluForwardKernel(T* out, const T* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = Load(in + i);
    const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
    Store(out + i, 0.5f * x * (1.0f + tanhf(inner)));
  }
}

__device__ __forceinline__ float GeluGrad(float x) {
  const float inner = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float t = tanhf(inner);
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
}

// Each element is read and written by the same thread, so din may alias dout (both kernels).
template <typename T>
__global__ void GeluBackwardKernel(T* din, const T* in, const T* dout, int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = GeluGrad(Load(in + i)) * Load(dout + i);
    Store(din + i, accumulate ? Load(din + i) + g : g);
  }
}

// The same over 16-byte vectors (Pack16), when every pointer is aligned and n a whole number of
// them: one vector a thread per iteration.
template <typename T>
__global__ void GeluBackwardVecKernel(T* din, const T* in, const T* dout, int64_t n,
                                      bool accumulate) {
  constexpr int kV = Pack16<T>::kSize;
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kV; i < n;
       i += int64_t{gridDim.x} * blockDim.x * kV) {
    const Pack16<T> x = LoadPack(in + i), dy = LoadPack(dout + i);
    Pack16<T> d;
    if (accumulate) d = LoadPack(din + i);
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const float g = GeluGrad(x.Get(e)) * dy.Get(e);
      d.Set(e, accumulate ? d.Get(e) + g : g);
    }
    StorePack(din + i, d);
  }
}

int Blocks(int64_t n) { return GridStrideBlocks(n, kElementwiseThreads); }

template <typename T>
cudaError_t Forward(T* out, const T* in, int64_t n, cudaStream_t stream) {
  ClearStaleError();
  if (n == 0) return cudaSuccess;
  GeluForwardKernel<<<Blocks(n), kElementwiseThreads, 0, stream>>>(out, in, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Backward(T* din, const T* in, const T* dout, int64_t n, bool accumulate,
                     cudaStream_t stream) {
  ClearStaleError();
  if (n == 0) return cudaSuccess;
  if (RowsVectorizable(n, sizeof(T), {din, in, dout})) {
    GeluBackwardVecKernel<<<Blocks(n / Pack16<T>::kSize), kElementwiseThreads, 0, stream>>>(
        din, in, dout, n, accumulate);
  } else {
    GeluBackwardKernel<<<Blocks(n), kElementwiseThreads, 0, stream>>>(din, in, dout, n, accumulate);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGeluForward(float* out, const float* in, int64_t n, cudaStream_t stream) {
  return Forward(out, in, n, stream);
}
cudaError_t LaunchGeluForward(__nv_bfloat16* out, const __nv_bfloat16* in, int64_t n,
                              cudaStream_t stream) {
  return Forward(out, in, n, stream);
}
cudaError_t LaunchGeluBackward(float* din, const float* in, const float* dout, int64_t n,
                               bool accumulate, cudaStream_t stream) {
  return Backward(din, in, dout, n, accumulate, stream);
}
cudaError_t LaunchGeluBackward(__nv_bfloat16* din, const __nv_bfloat16* in,
                               const __nv_bfloat16* dout, int64_t n, bool accumulate,
                               cudaStream_t stream) {
  return Backward(din, in, dout, n, accumulate, stream);
}

}  // namespace ringmaster::kernels
