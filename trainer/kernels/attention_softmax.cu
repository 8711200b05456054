#include "trainer/kernels/attention_launch.h"
#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"

namespace ringmaster::kernels {
namespace {

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

// The vectorized kernels: the same, with the row in registers (lane l holds 16-byte vectors l,
// l + 32, ...: Pack16, kChunks of them), each element read from memory once, and above the
// diagonal only the vector that holds it read (its other elements masked). Taken when the rows
// are whole aligned vectors and fit (WarpRowChunks).
template <typename T, int kChunks>
__global__ void SoftmaxVecKernel(T* att, int64_t rows, int T_) {
  constexpr int kV = Pack16<T>::kSize;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T_);
  T* x = att + row * T_;
  Pack16<T> p[kChunks];
  float max = -INFINITY;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int s = (k * 32 + lane) * kV;
    if (s > t) continue;
    p[k] = LoadPack(x + s);
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      if (s + i <= t) max = fmaxf(max, p[k].Get(i));
    }
  }
  max = device::WarpMax(max);
  // The exponentials, kept for the write (zero above the diagonal).
  float e[kChunks][kV];
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int s = (k * 32 + lane) * kV;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      e[k][i] = s + i <= t ? expf(p[k].Get(i) - max) : 0.0f;
      sum += e[k][i];
    }
  }
  const float inv = 1.0f / device::WarpSum(sum);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int s = (k * 32 + lane) * kV;
    if (s >= T_) continue;
    Pack16<T> o;
#pragma unroll
    for (int i = 0; i < kV; ++i) o.Set(i, e[k][i] * inv);
    StorePack(x + s, o);
  }
}

template <typename T, int kChunks>
__global__ void SoftmaxBackwardVecKernel(T* datt, const T* att, int64_t rows, int T_) {
  constexpr int kV = Pack16<T>::kSize;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T_);
  T* d = datt + row * T_;
  const T* a = att + row * T_;
  Pack16<T> pa[kChunks], pd[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int s = (k * 32 + lane) * kV;
    if (s > t) continue;
    pa[k] = LoadPack(a + s);
    pd[k] = LoadPack(d + s);
  }
  float dot = 0;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int s = (k * 32 + lane) * kV;
    if (s > t) continue;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      if (s + i <= t) dot += pa[k].Get(i) * pd[k].Get(i);
    }
  }
  dot = device::WarpSum(dot);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int s = (k * 32 + lane) * kV;
    if (s >= T_) continue;
    Pack16<T> o;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      o.Set(i, s + i <= t ? pa[k].Get(i) * (pd[k].Get(i) - dot) : 0.0f);
    }
    StorePack(d + s, o);
  }
}

int64_t Blocks(int64_t rows) { return WarpPerRowBlocks(rows, kWarpsPerBlock); }
constexpr int kThreads = kWarpsPerBlock * 32;

template <typename T>
cudaError_t Softmax(T* att, int64_t rows, int T_, cudaStream_t stream) {
  ClearStaleError();
  if (rows == 0) return cudaSuccess;
  const int chunks = RowsVectorizable(T_, sizeof(T), {att}) ? WarpRowChunks(T_, sizeof(T)) : 0;
  if (!LaunchWarpRowVariant(chunks, [&](auto c) {
        constexpr int kChunks = decltype(c)::value;
        SoftmaxVecKernel<T, kChunks><<<Blocks(rows), kThreads, 0, stream>>>(att, rows, T_);
      })) {
    SoftmaxKernel<<<Blocks(rows), kThreads, 0, stream>>>(att, rows, T_);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t SoftmaxBackward(T* datt, const T* att, int64_t rows, int T_, cudaStream_t stream) {
  ClearStaleError();
  if (rows == 0) return cudaSuccess;
  const int chunks =
      RowsVectorizable(T_, sizeof(T), {datt, att}) ? WarpRowChunks(T_, sizeof(T)) : 0;
  if (!LaunchWarpRowVariant(chunks, [&](auto c) {
        constexpr int kChunks = decltype(c)::value;
        SoftmaxBackwardVecKernel<T, kChunks><<<Blocks(rows), kThreads, 0, stream>>>(datt, att,
                                                                                   rows, T_);
      })) {
    SoftmaxBackwardKernel<<<Blocks(rows), kThreads, 0, stream>>>(datt, att, rows, T_);
  }
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
