#include "trainer/kernels/cross_entropy_launch.h"
#include "trainer/kernels/kernel_utils.cuh"
#include "trainer/kernels/launch_shape.h"
#include "trainer/kernels/online_softmax.h"

namespace ringmaster::kernels {
namespace {

constexpr int kThreads = 512;

__device__ SoftmaxState WarpMerge(SoftmaxState s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    SoftmaxState other;
    other.max = __shfl_xor_sync(0xffffffffu, s.max, offset);
    other.sum = __shfl_xor_sync(0xffffffffu, s.sum, offset);
    // Partner lanes may differ in the last bit (nvcc contracts the merge into FMAs in operand
    // order); only lane 0's state is used afterwards.
    s = SoftmaxMerge(s, other);
  }
  return s;
}

// The block's merge of its threads' states into the row's (max, sum), which every thread gets,
// and the row's loss, written by thread 0 (which reads the target's logit before any thread can
// overwrite the row: the caller writes gradients only after this returns). Contains
// __syncthreads(): every thread of the block must call it.
template <typename T>
__device__ SoftmaxState RowSoftmaxAndLoss(SoftmaxState s, const T* z, const int32_t* targets,
                                          float* losses) {
  // Plain floats: a __shared__ variable cannot have SoftmaxState's initialising constructor.
  __shared__ float warp_max[kThreads / 32], warp_sum[kThreads / 32];
  __shared__ float row_max, row_sum;
  s = WarpMerge(s);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_max[warp] = s.max;
    warp_sum[warp] = s.sum;
  }
  __syncthreads();
  if (warp == 0) {
    s = SoftmaxState{};
    if (lane < kThreads / 32) {
      s.max = warp_max[lane];
      s.sum = warp_sum[lane];
    }
    s = WarpMerge(s);
    if (lane == 0) {
      row_max = s.max;
      row_sum = s.sum;
      const int target = targets[blockIdx.x];
      losses[blockIdx.x] = logf(s.sum) - (Load(z + target) - s.max);
    }
  }
  __syncthreads();
  SoftmaxState row;
  row.max = row_max;
  row.sum = row_sum;
  return row;
}

template <typename T>
__global__ void CrossEntropyKernel(T* logits, float* losses, const int32_t* targets, int V, int Vp,
                                   float dloss) {
  T* z = logits + int64_t{blockIdx.x} * Vp;
  SoftmaxState s;
  for (int j = threadIdx.x; j < V; j += kThreads) s = SoftmaxAdd(s, Load(z + j));
  const SoftmaxState row = RowSoftmaxAndLoss(s, z, targets, losses);
  if (dloss == 0.0f) return;
  const float max = row.max;
  const int target = targets[blockIdx.x];
  const float inv = 1.0f / row.sum;
  for (int j = threadIdx.x; j < Vp; j += kThreads) {
    float g = 0.0f;
    if (j < V) {
      g = expf(Load(z + j) - max) * inv * dloss;
      if (j == target) g -= dloss;
    }
    Store(z + j, g);
  }
}

// The same over 16-byte vectors (Pack16), when the rows are whole aligned vectors: each thread
// folds a vector's maximum and sum into its state at once. The padding columns [V, Vp) are read
// with the last real ones but left out of every sum.
template <typename T>
__global__ void CrossEntropyVecKernel(T* logits, float* losses, const int32_t* targets, int V,
                                      int Vp, float dloss) {
  constexpr int kV = Pack16<T>::kSize;
  T* z = logits + int64_t{blockIdx.x} * Vp;
  SoftmaxState s;
  for (int j = threadIdx.x * kV; j < V; j += kThreads * kV) {
    const Pack16<T> p = LoadPack(z + j);
    SoftmaxState v;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      if (j + i < V) v.max = fmaxf(v.max, p.Get(i));
    }
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      if (j + i < V) v.sum += expf(p.Get(i) - v.max);
    }
    s = SoftmaxMerge(s, v);
  }
  const SoftmaxState row = RowSoftmaxAndLoss(s, z, targets, losses);
  if (dloss == 0.0f) return;
  const float max = row.max;
  const int target = targets[blockIdx.x];
  const float inv = 1.0f / row.sum;
  for (int j = threadIdx.x * kV; j < Vp; j += kThreads * kV) {
    const Pack16<T> p = LoadPack(z + j);
    Pack16<T> g;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      float v = 0.0f;
      if (j + i < V) {
        v = expf(p.Get(i) - max) * inv * dloss;
        if (j + i == target) v -= dloss;
      }
      g.Set(i, v);
    }
    StorePack(z + j, g);
  }
}

template <typename T>
cudaError_t CrossEntropy(T* logits, float* losses, const int32_t* targets, int N, int V, int Vp,
                         float dloss, cudaStream_t stream) {
  ClearStaleError();
  if (N == 0) return cudaSuccess;
  if (RowsVectorizable(Vp, sizeof(T), {logits})) {
    CrossEntropyVecKernel<<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, dloss);
  } else {
    CrossEntropyKernel<<<N, kThreads, 0, stream>>>(logits, losses, targets, V, Vp, dloss);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCrossEntropy(float* logits, float* losses, const int32_t* targets, int N, int V,
                               int Vp, float dloss, cudaStream_t stream) {
  return CrossEntropy(logits, losses, targets, N, V, Vp, dloss, stream);
}
cudaError_t LaunchCrossEntropy(__nv_bfloat16* logits, float* losses, const int32_t* targets, int N,
                               int V, int Vp, float dloss, cudaStream_t stream) {
  return CrossEntropy(logits, losses, targets, N, V, Vp, dloss, stream);
}

}  // namespace ringmaster::kernels
