// The GPU a trainer process uses, if any: one decision at startup, in a header without CUDA
// types so that the trainer compiles the same way with and without CUDA.
//
// OpenAccelerator reads CUDA_VISIBLE_DEVICES (device_selection.h: the agent sets it to the GPU
// it assigned the rank). When it names a GPU and this binary was built with CUDA, the process
// trains on that GPU: a CudaDevice computing in bf16 or fp32 (cuda_device.h), NCCL communicators
// for its groups (nccl_communicator.h), the GPU's dense peak of that type for MFU (gpu_peak.h).
// Otherwise it returns null and the process uses the CPU device and Gloo as before.
//
// Ownership and lifetime: the accelerator owns the device; communicators from Connect() are the
// caller's and must not be used after the accelerator is destroyed (their operations wait on
// the device's compute stream). Connect() is thread-safe; the device follows device.h's rules.
#ifndef RINGMASTER_TRAINER_CUDA_ACCELERATOR_H_
#define RINGMASTER_TRAINER_CUDA_ACCELERATOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/key_value_store.h"
#include "trainer/model/device.h"

namespace ringmaster::trainer {

class Accelerator {
 public:
  virtual ~Accelerator() = default;
  // The GPU's Device ("cuda:0", bf16 compute).
  virtual Device* device() = 0;
  // For logs: "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB".
  virtual std::string description() const = 0;
  // Dense peak FLOP/s of the compute type (bf16 tensor cores, or fp32 without TF32) for MFU; 0
  // when the GPU is not in gpu_peak.h's table.
  virtual double peak_flops() const = 0;
  // Joins group `name` over NCCL (ConnectNccl's contract: rank 0's id through `store`, every
  // operation bounded by `timeout`, UNAVAILABLE / DEADLINE_EXCEEDED on a lost peer).
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Connect(const std::string& name, int rank,
                                                                int size, KeyValueStore* store,
                                                                absl::Duration timeout) = 0;
};

// The accelerator the environment asks for, or null for the CPU (no GPU named, or a binary
// built without CUDA). `compute_dtype` is the GPU's compute type: kBF16 (the default for GPU
// jobs) or kF32 (a job's `precision: fp32`); `fused_attention` lets the device use the fused
// attention kernels where they take the shape (a job's `attention` unset or fused;
// CudaDeviceOptions::fuse_attention). Errors: UNAVAILABLE when the named GPU cannot be used (no
// driver, no device: a node fault; retryable), as MakeCudaDevice reports them. Sets, before any
// other thread starts, what the accelerator's libraries read from the environment once
// (NCCL_RUNTIME_CONNECT: nccl_communicator.h). Nothing without CUDA.
void PrepareAcceleratorEnvironment();

absl::StatusOr<std::unique_ptr<Accelerator>> OpenAccelerator(
    const std::function<std::optional<std::string>(const char* name)>& env,
    DType compute_dtype = DType::kBF16, bool fused_attention = false);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_ACCELERATOR_H_
