// The CUDA device: trainer::Device (trainer/model/device.h) on one GPU.
//
//  - Compute type bf16 by default (activations, working weights, gradients); fp32 on request
//    (CudaDeviceOptions::compute_dtype), which the parity tests use to compare with the CPU
//    device closely. Master weights and optimizer state are always fp32 (the optimizer keeps
//    them; Device::AdamW updates both copies). Statistics, losses and token ids as device.h says.
//  - GEMMs: cuBLASLt for the dense layers, the bias and GELU fused into its epilogue where it
//    offers an algorithm (kernels/matmul_cuda.h); cuBLAS strided batches for Device::Gemm.
//    Always fp32 accumulation, no TF32.
//  - Attention: cuBLAS strided batches over materialised probabilities; with
//    CudaDeviceOptions::fuse_attention, fused (flash) kernels on the tensor cores where they
//    take the shape (bf16, head size 32 or 64) (kernels/attention_cuda.h).
//  - Fused operations: the kernels of trainer/kernels (*_cuda.h), each with a CPU reference and
//    a parity test. The reductions (bias and LayerNorm gradients, embedding gradients,
//    SumSquares) are deterministic.
//
// Streams and ordering: every operation is enqueued on one compute stream (stream()), in issue
// order, and returns before the GPU has run it. CopyToHost, SumSquares, Synchronize and
// CopyToDevice wait for the stream. Work on other streams (the NCCL communicator's) must order
// itself against stream() with events; nccl_communicator.h does, after a Mark() (an event
// recorded where the issuing thread took it) or else after all the work issued so far.
//
// Errors: operations that return void record the first failure (a launch error, a cuBLAS
// error, a tensor of the wrong dtype), skip all later work, and report it from the next
// Synchronize(), CopyToHost(), CopyToDevice() or SumSquares(); codes as cuda_status.h
// (INVALID_ARGUMENT for dtype mismatches, a programming error).
//
// Threading: as device.h says, one thread issues operations; Allocate, CopyToHost and
// CopyToDevice may also be called from other threads (each call selects the device itself).
// Buffers from Allocate must be released before the device is destroyed.
#ifndef RINGMASTER_TRAINER_CUDA_CUDA_DEVICE_H_
#define RINGMASTER_TRAINER_CUDA_CUDA_DEVICE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/model/device.h"

namespace ringmaster::trainer {

struct CudaDeviceOptions {
  // kBF16 (default) or kF32.
  DType compute_dtype = DType::kBF16;
  // Allow cuBLASLt's bias / GELU epilogues (off: separate kernels; the results are the same up
  // to rounding, for tests and diagnosis).
  bool fuse_bias = true;
  bool fuse_gelu = true;
  // Fused (flash) attention where the kernels take the shape: bf16, head size 32 or 64 (off:
  // the materialised probabilities, cuBLAS and the softmax kernels). Off unless asked for here;
  // the trainer asks for it unless a job says `attention: materialized` (OpenAccelerator).
  bool fuse_attention = false;
  // cuBLASLt workspace.
  size_t gemm_workspace_bytes = 32 << 20;
};

// A CudaDevice's Mark(): an event recorded on its compute stream. Other streams wait for it
// with cudaStreamWaitEvent (nccl_communicator.h).
class CudaDeviceMark final : public DeviceMark {
 public:
  // Takes ownership of `event`, recorded on device `device` (destroyed with the mark, on any
  // thread; CUDA keeps it until it has completed).
  CudaDeviceMark(cudaEvent_t event, int device) : event_(event), device_(device) {}
  ~CudaDeviceMark() override;
  CudaDeviceMark(const CudaDeviceMark&) = delete;
  CudaDeviceMark& operator=(const CudaDeviceMark&) = delete;
  cudaEvent_t event() const { return event_; }

 private:
  const cudaEvent_t event_;
  const int device_;
};

class CudaDevice : public Device {
 public:
  // The CUDA device index (as the CUDA runtime numbers the visible devices).
  virtual int index() const = 0;
  // The compute stream every operation is enqueued on.
  virtual cudaStream_t stream() const = 0;
  // "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB".
  virtual std::string description() const = 0;
  // Bytes currently allocated through Allocate(), and the most at any time.
  virtual int64_t allocated_bytes() const = 0;
  virtual int64_t peak_allocated_bytes() const = 0;
  // The dense layers' GEMM plans so far and whether cuBLASLt had an algorithm for each
  // (kernels::FormatGemmPlanCounts): shows which fusions ran. From the issuing thread.
  virtual std::string gemm_plans() const = 0;
};

// Number of CUDA devices this process can use; 0 without a driver or a GPU, and also when the
// runtime cannot use them (CudaDeviceCount, common/cuda_device_count.h, says why).
int VisibleCudaDevices();

// The device `device_index` (< VisibleCudaDevices()): a compute stream, cuBLAS and cuBLASLt
// handles and the GEMM workspace. UNAVAILABLE when there is no such device or the driver cannot
// serve this build (the message says which);
// INVALID_ARGUMENT for a compute dtype other than kF32 and kBF16; RESOURCE_EXHAUSTED when the
// workspace does not fit.
absl::StatusOr<std::unique_ptr<CudaDevice>> MakeCudaDevice(int device_index,
                                                           CudaDeviceOptions options = {});

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_CUDA_DEVICE_H_
