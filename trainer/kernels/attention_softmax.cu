#include "trainer/kernels/attention_launch.h"
#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"

namespace ringmaster::kernels {
namespace {

using device::Load;
using device::Store;

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void SoftmaxKernel(T* att, int64_t rows, int T_) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T_);
  T* x = att + row * T_;
  float max = -INFINITY;
  for (int s = lane; s <= t; s += 32) max = fmaxf(max, Load(x + s));
  max = device::WarpMax(max);
  float sum = 0;
  for (int s = lane; s <= t; s += 32) sum += expf(Load(x + s) - max);
  const float inv = 1.0f / device::WarpSum(sum);
  for (int s = lane; s < T_; s += 32) Store(x + s, s <= t ? expf(Load(x + s) - max) * inv : 0.0f);
}

template <typename T>
__global__ void SoftmaxBackwardKernel(T* datt, const T* att, int64_t rows, int T_) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T_);
  T* d = datt + row * T_;
  const T* a = att + row * T_;
  float dot = 0;
  for (int s = lane; s <= t; s += 32) dot += Load(a + s) * Load(d + s);
  dot = device::WarpSum(dot);
  for (int s = lane; s < T_; s += 32) {
    Store(d + s, s <= t ? Load(a + s) * (Load(d + s) - dot) : 0.0f);
  }
}

template <typename T>
cudaError_t Softmax(T* att, int64_t rows, int T_, cudaStream_t stream) {
  ClearStaleError();
  if (rows == 0) return cudaSuccess;
  SoftmaxKernel<<<WarpPerRowBlocks(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
      att, rows, T_);
  return cudaGetLastError();
}

template <typename T>
cudaError_t SoftmaxBackward(T* datt, const T* att, int64_t rows, int T_, cudaStream_t stream) {
  ClearStaleError();
  if (rows == 0) return cudaSuccess;
  SoftmaxBackwardKernel<<<WarpPerRowBlocks(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
      datt, att, rows, T_);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCausalSoftmax(float* att, int64_t rows, int T, cudaStream_t stream) {
  return Softmax(att, rows, T, stream);
}
cudaError_t LaunchCausalSoftmax(__nv_bfloat16* att, int64_t rows, int T, cudaStream_t stream) {
  return Softmax(att, rows, T, stream);
}
cudaError_t LaunchCausalSoftmaxBackward(float* datt, const float* att, int64_t rows, int T,
                                        cudaStream_t stream) {
  return SoftmaxBackward(datt, att, rows, T, stream);
}
cudaError_t LaunchCausalSoftmaxBackward(__nv_bfloat16* datt, const __nv_bfloat16* att, int64_t rows,
                                        int T, cudaStream_t stream) {
  return SoftmaxBackward(datt, att, rows, T, stream);
}

}  // namespace ringmaster::kernels
