#include "trainer/kernels/elementwise_launch.h"
#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"

namespace ringmaster::kernels {
namespace {

#define RM_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

template <typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  RM_GRID_STRIDE(i, n) { Store(out + i, Load(a + i) + Load(b + i)); }
}

template <typename T>
__global__ void ScaleKernel(T* x, float factor, int64_t n) {
  RM_GRID_STRIDE(i, n) { Store(x + i, Load(x + i) * factor); }
}

template <typename T>
__global__ void AddBiasKernel(T* out, const T* bias, int64_t n, int cols) {
  RM_GRID_STRIDE(i, n) { Store(out + i, Load(out + i) + Load(bias + i % cols)); }
}

template <typename Dst, typename Src>
__global__ void ConvertKernel(Dst* out, const Src* in, int64_t n) {
  RM_GRID_STRIDE(i, n) { Store(out + i, Load(in + i)); }
}

#undef RM_GRID_STRIDE

int Blocks(int64_t n) { return GridStrideBlocks(n, kElementwiseThreads); }

template <typename T>
cudaError_t Add(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  ClearStaleError();
  if (n == 0) return cudaSuccess;
  AddKernel<<<Blocks(n), kElementwiseThreads, 0, stream>>>(out, a, b, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Scale(T* x, float factor, int64_t n, cudaStream_t stream) {
  ClearStaleError();
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<Blocks(n), kElementwiseThreads, 0, stream>>>(x, factor, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t AddBias(T* out, const T* bias, int rows, int cols, cudaStream_t stream) {
  ClearStaleError();
  const int64_t n = int64_t{rows} * cols;
  if (n == 0) return cudaSuccess;
  AddBiasKernel<<<Blocks(n), kElementwiseThreads, 0, stream>>>(out, bias, n, cols);
  return cudaGetLastError();
}

template <typename Dst, typename Src>
cudaError_t Convert(Dst* out, const Src* in, int64_t n, cudaStream_t stream) {
  ClearStaleError();
  if (n == 0) return cudaSuccess;
  ConvertKernel<<<Blocks(n), kElementwiseThreads, 0, stream>>>(out, in, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAdd(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  return Add(out, a, b, n, stream);
}
cudaError_t LaunchAdd(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                      cudaStream_t stream) {
  return Add(out, a, b, n, stream);
}
cudaError_t LaunchScale(float* x, float factor, int64_t n, cudaStream_t stream) {
  return Scale(x, factor, n, stream);
}
cudaError_t LaunchScale(__nv_bfloat16* x, float factor, int64_t n, cudaStream_t stream) {
  return Scale(x, factor, n, stream);
}
cudaError_t LaunchAddBias(float* out, const float* bias, int rows, int cols, cudaStream_t stream) {
  return AddBias(out, bias, rows, cols, stream);
}
cudaError_t LaunchAddBias(__nv_bfloat16* out, const __nv_bfloat16* bias, int rows, int cols,
                          cudaStream_t stream) {
  return AddBias(out, bias, rows, cols, stream);
}
cudaError_t LaunchConvert(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream) {
  return Convert(out, in, n, stream);
}
cudaError_t LaunchConvert(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  return Convert(out, in, n, stream);
}

}  // namespace ringmaster::kernels
