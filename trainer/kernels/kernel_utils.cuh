// Device-side helpers shared by the .cu files (nvcc only; each .cu is its own translation unit,
// so these are inline): fp32/bf16 loads and stores that compute in fp32 and round once when
// storing (round to nearest even), and deterministic warp/block reductions (fixed butterfly
// order, no atomics).
#ifndef RINGMASTER_TRAINER_KERNELS_KERNEL_UTILS_CUH_
#define RINGMASTER_TRAINER_KERNELS_KERNEL_UTILS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "trainer/kernels/launch_shape.h"

namespace ringmaster::kernels::device {

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Sixteen bytes of T (8 bf16 or 4 floats), moved between registers and memory in one 16-byte
// access: the vectorized kernels' unit. The address must be 16-byte aligned; the launchers check
// (launch_shape.h's RowsVectorizable) and fall back to the scalar kernels otherwise.
template <typename T>
struct Pack16 {
  static constexpr int kSize = 16 / sizeof(T);
  alignas(16) T e[kSize];
  __device__ __forceinline__ float Get(int i) const { return Load(e + i); }
  __device__ __forceinline__ void Set(int i, float v) { Store(e + i, v); }
};

#ifndef __CUDA_ARCH__
// Emulated on the CPU (testing/cuda_emu): a GPU faults on a misaligned vector access, so the
// emulation stops the test too.
inline void CheckPackAligned(const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0) return;
  fprintf(stderr, "misaligned 16-byte access at %p\n", p);
  abort();
}
#endif

template <typename T>
__device__ __forceinline__ Pack16<T> LoadPack(const T* p) {
  Pack16<T> r;
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(r.e) = *reinterpret_cast<const uint4*>(p);
#else
  CheckPackAligned(p);
  memcpy(r.e, p, 16);
#endif
  return r;
}

template <typename T>
__device__ __forceinline__ void StorePack(T* p, const Pack16<T>& v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(v.e);
#else
  CheckPackAligned(p);
  memcpy(p, v.e, 16);
#endif
}

// Sixteen bytes from global to shared memory without passing through registers (cp.async,
// sm_80 and later), or with `zeros` sixteen zero bytes (src is not read). Both addresses
// 16-byte aligned. Asynchronous: CommitCopies closes the group of copies issued since the last,
// and WaitCopies<n> waits until at most the n newest groups are pending; a __syncthreads after
// it shows every thread's copies to the block. Emulated, the destination reads as NaNs until
// the wait (cuda_emu.h's CopyAsync).
__device__ __forceinline__ void CopyPackAsync(void* dst, const void* src, bool zeros) {
#if defined(__CUDA_ARCH__)
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(address), "l"(src),
               "r"(zeros ? 0 : 16)
               : "memory");
#elif defined(RINGMASTER_CUDA_EMU)
  CheckPackAligned(dst);
  if (!zeros) CheckPackAligned(src);
  emu::CopyAsync(dst, src, zeros);
#endif
}

__device__ __forceinline__ void CommitCopies() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;" ::: "memory");
#elif defined(RINGMASTER_CUDA_EMU)
  emu::CommitCopies();
#endif
}

template <int kPending>
__device__ __forceinline__ void WaitCopies() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
#elif defined(RINGMASTER_CUDA_EMU)
  emu::WaitCopies(kPending);
#endif
}

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

// The element loads and stores every kernel file uses, by their short names in the kernels'
// namespace (only the kernels' .cu files include this header).
using device::Load;
using device::LoadPack;
using device::Pack16;
using device::Store;
using device::StorePack;

// Calls launch(std::integral_constant<int, N>{}) for the compiled variant N (1, 2, 4 or 8
// vectors a lane) of a vectorized one-warp-per-row kernel that `chunks` names (launch_shape.h's
// WarpRowChunks, or 0 when the rows are not vectorizable); returns false, having called nothing,
// for 0: the scalar kernel's rows.
template <typename Launch>
bool LaunchWarpRowVariant(int chunks, Launch&& launch) {
  static_assert(kMaxWarpRowChunks == 8, "a compiled variant per power of two up to the maximum");
  switch (chunks) {
    case 1:
      launch(std::integral_constant<int, 1>{});
      return true;
    case 2:
      launch(std::integral_constant<int, 2>{});
      return true;
    case 4:
      launch(std::integral_constant<int, 4>{});
      return true;
    case 8:
      launch(std::integral_constant<int, 8>{});
      return true;
    default:
      return false;
  }
}

// The runtime's per-thread "last error" is also set by failed calls whose callers handled them
// (cudaErrorNotReady from an event query while polling NCCL, a cudaMalloc that did not fit) and
// stays set until read. Every launcher calls this first, so that the cudaGetLastError() after
// its launch reports that launch alone. (Errors of the device itself are sticky: the next
// synchronisation still reports them.)
inline void ClearStaleError() { (void)cudaGetLastError(); }

}  // namespace ringmaster::kernels

#endif  // RINGMASTER_TRAINER_KERNELS_KERNEL_UTILS_CUH_
