// CUDA kernels on the CPU, for tests on machines without a GPU: the .cu files are compiled as
// C++ (cu_to_cc.py rewrites their launches) against this header, and every launch runs the
// kernel once per CUDA thread, block after block. The threads of a block are fibers on the
// calling thread: __syncthreads, __syncthreads_count and warp shuffles switch between them,
// so a kernel's indexing, bounds, barriers and reductions run as written and can be checked
// against the CPU references.
//
// It checks what a GPU would refuse or leave undefined: launch shapes beyond the hardware's
// limits (cudaErrorInvalidConfiguration), a block barrier some live threads never reach, and a
// full-mask warp shuffle in a warp with exited or missing lanes (cudaErrorLaunchFailure, with a
// message from TakeFailures()). The threads between two barriers run one after the other,
// forwards in one launch and backwards in the next (SetOrder): a read of shared memory that
// lacks its barrier sees the write in one of the two orders and not in the other.
//
// Host threads may launch at once (the ranks of a multi-GPU test, a communication thread): their
// launches run one at a time, under a process-wide lock (a kernel's shared memory is a static).
// The last error and the failures are per host thread, as CUDA's last error is.
//
// Tensor-core instructions (tensor_core.cuh's mma.sync and ldmatrix) are emulated as mma_emu.h
// says.
//
// Not emulated: timing, concurrency between streams, the memory model beyond barriers, the
// GPU's own math (expf & co. are the host's), and anything the .cu files do not use.
#ifndef RINGMASTER_TESTING_CUDA_EMU_CUDA_EMU_H_
#define RINGMASTER_TESTING_CUDA_EMU_CUDA_EMU_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

namespace emu {

// The CUDA thread being run: its indices and its launch's shape.
struct ThreadDims {
  uint3 thread;
  uint3 block;
  dim3 block_dim;
  dim3 grid_dim;
};
const ThreadDims& Current();

// The order in which the threads of a block run between two barriers: by default forwards and
// backwards in turn, each launch site's launches alternating, so that a test launching a kernel
// several times runs it both ways.
enum class Order { kForward, kReverse, kAlternate };
void SetOrder(Order order);
Order CurrentOrder();

// A grid or block size as written in a launch: a dim3, or an integer that may not fit one.
struct LaunchSize {
  LaunchSize(dim3 d) : dim(d) {}  // NOLINT: implicit, as in <<<...>>>
  LaunchSize(int64_t n) : dim(static_cast<unsigned>(n)), integer(true), whole_x(n) {}  // NOLINT
  LaunchSize(int n) : LaunchSize(static_cast<int64_t>(n)) {}            // NOLINT
  dim3 dim;
  bool integer = false;  // given as an integer: whole_x, to catch one a dim3 would truncate
  int64_t whole_x = 0;
};

struct LaunchConfig {
  LaunchSize grid;
  LaunchSize block;
  cudaStream_t stream;
};
inline LaunchConfig MakeConfig(LaunchSize grid, LaunchSize block, size_t /*shared_bytes*/ = 0,
                               cudaStream_t stream = nullptr) {
  return LaunchConfig{grid, block, stream};
}

// Runs `kernel` (a call of the kernel with its arguments) for every thread of the grid, the
// threads of each block in `order` (kAlternate is not an order here), once the work pending on
// the launch's stream has completed (fake_streams.h).
void LaunchInOrder(const LaunchConfig& config, const std::function<void()>& kernel, Order order);

// The order launch site `Site` takes now: SetOrder's, or under kAlternate the opposite of the
// site's previous launch on this thread (forwards first).
template <typename Site>
Order NextOrder() {
  // One per launch site (each lambda has its own type) and host thread: every rank of a
  // multi-rank test runs each kernel both ways.
  static thread_local unsigned launches = 0;
  const Order set = CurrentOrder();
  if (set != Order::kAlternate) return set;
  return launches++ % 2 == 0 ? Order::kForward : Order::kReverse;
}

// A launch as cu_to_cc.py writes it. The order alternates per launch site, so that a launcher
// that starts several kernels runs each of them both ways over a test's launches.
template <typename Kernel>
void Launch(const LaunchConfig& config, const Kernel& kernel) {
  LaunchInOrder(config, kernel, NextOrder<Kernel>());
}

// cp.async (kernel_utils.cuh's CopyPackAsync, CommitCopies, WaitCopies): 16 bytes from `src`
// (or zeros) reach `dst` only when the calling thread waits for their group, and `dst` holds
// NaNs meanwhile, so a kernel that reads a tile before waiting for it, or refills a buffer
// another thread still reads, computes NaNs here. Copies not waited for land when the thread
// ends.
void CopyAsync(void* dst, const void* src, bool zeros);
void CommitCopies();
// Waits until at most `pending` of the calling thread's committed groups are in flight.
void WaitCopies(int pending);

void SyncThreads();
int SyncThreadsCount(int predicate);
uint64_t ShuffleXor(unsigned mask, uint64_t bits, int lane_mask, int width);
// __syncwarp: every lane of the calling thread's warp reaches it before any goes on (full
// warps only, as ShuffleXor).
void SyncWarp(unsigned mask);

// Like cudaGetLastError (fake_cuda's answers it with this): the calling thread's first error
// since its last call, then cudaSuccess again.
cudaError_t GetLastError();
// What went wrong in the calling thread's launches since its last call ("" when nothing did).
std::string TakeFailures();

// Records `error` as the calling thread's last error (a failed runtime call, as CUDA does), with
// `what`, which is also printed.
void RecordError(cudaError_t error, const std::string& what);
// Records `error` as the last error without a message: a status, not a failure
// (cudaErrorNotReady from a query).
void SetLastError(cudaError_t error);

}  // namespace emu

#define threadIdx (::emu::Current().thread)
#define blockIdx (::emu::Current().block)
#define blockDim (::emu::Current().block_dim)
#define gridDim (::emu::Current().grid_dim)

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)  // register allocation is nvcc's
#undef __shared__
#define __shared__ static  // blocks run one at a time: a static is the block's shared memory

inline void __syncthreads() { emu::SyncThreads(); }
inline int __syncthreads_count(int predicate) { return emu::SyncThreadsCount(predicate); }

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffles of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = emu::ShuffleXor(mask, bits, lane_mask, width);
  T result;
  std::memcpy(&result, &bits, sizeof(T));
  return result;
}

inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::SyncWarp(mask); }

// Defined here only: the .cu files' helpers (tensor_core.cuh, kernel_utils.cuh) take their
// emulated branch where a GPU build would use PTX.
#define RINGMASTER_CUDA_EMU 1
#include "testing/cuda_emu/mma_emu.h"  // tensor_core.cuh's mma.sync and ldmatrix

#endif  // RINGMASTER_TESTING_CUDA_EMU_CUDA_EMU_H_
