#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"
#include "trainer/kernels/reduce_launch.h"

namespace ringmaster::kernels {
namespace {

constexpr int kSumThreads = 256;
// Column reductions: blocks of 32 columns x 8 row lanes.
constexpr int kColumns = 32;
constexpr int kRowLanes = 8;

template <typename T>
__global__ void SumSquaresPartialKernel(const T* x, int64_t n, double* partials) {
  __shared__ double shared[32];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = Load(x + i);
    acc += v * v;
  }
  acc = device::BlockSumDouble(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void SumPartialsKernel(const double* partials, int count, double* result) {
  // One thread, in order: at most kMaxSumSquaresBlocks additions.
  double sum = 0;
  for (int i = 0; i < count; ++i) sum += partials[i];
  *result = sum;
}

// Block (kColumns, kRowLanes) over columns [blockIdx.x * kColumns, +kColumns) and the rows of
// slice blockIdx.y: rows blockIdx.y * kRowLanes + threadIdx.y + k * splits * kRowLanes.
template <typename T>
__global__ void ColumnPartialKernel(const T* in, int rows, int cols, int splits, float* partials) {
  __shared__ float shared[kRowLanes][kColumns + 1];
  const int c = blockIdx.x * kColumns + threadIdx.x;
  float acc = 0;
  if (c < cols) {
    for (int64_t r = int64_t{blockIdx.y} * kRowLanes + threadIdx.y; r < rows;
         r += int64_t{splits} * kRowLanes) {
      acc += Load(in + r * cols + c);
    }
  }
  shared[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0;
    for (int y = 0; y < kRowLanes; ++y) sum += shared[y][threadIdx.x];
    partials[int64_t{blockIdx.y} * cols + c] = sum;
  }
}

// The same over 16-byte vectors (Pack16), when the rows are whole aligned vectors: each thread
// sums kV adjacent columns, so a warp reads 512 contiguous bytes of a row at once. Block
// (32, kRowLanes) over columns [blockIdx.x * 32 * kV, +32 * kV).
template <typename T>
__global__ void ColumnPartialVecKernel(const T* in, int rows, int cols, int splits,
                                       float* partials) {
  constexpr int kV = Pack16<T>::kSize;
  __shared__ float shared[kRowLanes][32 * kV + 1];
  const int c = (blockIdx.x * 32 + threadIdx.x) * kV;
  float acc[kV] = {};
  if (c < cols) {
    for (int64_t r = int64_t{blockIdx.y} * kRowLanes + threadIdx.y; r < rows;
         r += int64_t{splits} * kRowLanes) {
      const Pack16<T> p = LoadPack(in + r * cols + c);
#pragma unroll
      for (int i = 0; i < kV; ++i) acc[i] += p.Get(i);
    }
  }
#pragma unroll
  for (int i = 0; i < kV; ++i) shared[threadIdx.y][threadIdx.x * kV + i] = acc[i];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      float sum = 0;
      for (int y = 0; y < kRowLanes; ++y) sum += shared[y][threadIdx.x * kV + i];
      partials[int64_t{blockIdx.y} * cols + c + i] = sum;
    }
  }
}

template <typename T>
__global__ void ColumnFinishKernel(T* out, const float* partials, int cols, int splits,
                                   bool accumulate) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    float sum = 0;
    for (int s = 0; s < splits; ++s) sum += partials[int64_t{s} * cols + c];
    Store(out + c, accumulate ? Load(out + c) + sum : sum);
  }
}

template <typename T>
cudaError_t SumSquares(const T* x, int64_t n, double* partials, double* result,
                       cudaStream_t stream) {
  ClearStaleError();
  const int blocks = SumSquaresBlocks(n);
  SumSquaresPartialKernel<<<blocks, kSumThreads, 0, stream>>>(x, n, partials);
  SumPartialsKernel<<<1, 1, 0, stream>>>(partials, blocks, result);
  return cudaGetLastError();
}

template <typename T>
cudaError_t ColumnSums(T* out, const T* in, int rows, int cols, bool accumulate, float* scratch,
                       cudaStream_t stream) {
  ClearStaleError();
  if (cols == 0) return cudaSuccess;
  const int splits = ColumnReduceSplits(rows);
  if (RowsVectorizable(cols, sizeof(T), {in})) {
    const int per_block = 32 * Pack16<T>::kSize;
    const dim3 grid((cols + per_block - 1) / per_block, splits);
    ColumnPartialVecKernel<<<grid, dim3(32, kRowLanes), 0, stream>>>(in, rows, cols, splits,
                                                                     scratch);
  } else {
    const dim3 grid((cols + kColumns - 1) / kColumns, splits);
    ColumnPartialKernel<<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(in, rows, cols, splits,
                                                                        scratch);
  }
  ColumnFinishKernel<<<GridStrideBlocks(cols, kElementwiseThreads), kElementwiseThreads, 0,
                       stream>>>(out, scratch, cols, splits, accumulate);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSumSquares(const float* x, int64_t n, double* partials, double* result,
                             cudaStream_t stream) {
  return SumSquares(x, n, partials, result, stream);
}
cudaError_t LaunchSumSquares(const __nv_bfloat16* x, int64_t n, double* partials, double* result,
                             cudaStream_t stream) {
  return SumSquares(x, n, partials, result, stream);
}
cudaError_t LaunchColumnSums(float* out, const float* in, int rows, int cols, bool accumulate,
                             float* scratch, cudaStream_t stream) {
  return ColumnSums(out, in, rows, cols, accumulate, scratch, stream);
}
cudaError_t LaunchColumnSums(__nv_bfloat16* out, const __nv_bfloat16* in, int rows, int cols,
                             bool accumulate, float* scratch, cudaStream_t stream) {
  return ColumnSums(out, in, rows, cols, accumulate, scratch, stream);
}

}  // namespace ringmaster::kernels
