// Device-side helpers shared by the .cu files (nvcc only; each .cu is its own translation unit,
// so these are inline): fp32/bf16 loads and stores that compute in fp32 and round once when
// storing (round to nearest even), and deterministic warp/block reductions (fixed butterfly
// order, no atomics).
#ifndef RINGMASTER_TRAINER_KERNELS_KERNEL_UTILS_CUH_
#define RINGMASTER_TRAINER_KERNELS_KERNEL_UTILS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace ringmaster::kernels::device {

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ double WarpSumDouble(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 values. Contains __syncthreads(): every thread of the block must call it.
__device__ __forceinline__ double BlockSumDouble(double v, double* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = WarpSumDouble(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0;
  return WarpSumDouble(v);
}

}  // namespace ringmaster::kernels::device

namespace ringmaster::kernels {

// The runtime's per-thread "last error" is also set by failed calls whose callers handled them
// (cudaErrorNotReady from an event query while polling NCCL, a cudaMalloc that did not fit) and
// stays set until read. Every launcher calls this first, so that the cudaGetLastError() after
// its launch reports that launch alone. (Errors of the device itself are sticky: the next
// synchronisation still reports them.)
inline void ClearStaleError() { (void)cudaGetLastError(); }

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_KERNEL_UTILS_CUH_
