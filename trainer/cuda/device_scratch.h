// Temporary device memory for kernels that need it (reduction partials, sort space): one
// growable allocation on one device.
//
// Not thread-safe: owned by one user (a device or an operation object) that issues its work on
// one stream. Get(bytes, stream) returns at least `bytes`, reusing the current allocation when it
// is large enough. Growing is stream-ordered and never waits: the old allocation is released with
// cudaFreeAsync on the stream that last used it (so work still reading it finishes first) and the
// new one comes from the device's memory pool with cudaMallocAsync. Nothing here blocks behind a
// stuck kernel or collective. Growth happens only while sizes grow (the first steps of a run).
#ifndef RINGMASTER_TRAINER_CUDA_DEVICE_SCRATCH_H_
#define RINGMASTER_TRAINER_CUDA_DEVICE_SCRATCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/statusor.h"

namespace ringmaster::trainer {

class DeviceScratch {
 public:
  // Memory on CUDA device `device`.
  explicit DeviceScratch(int device) : device_(device) {}
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `bytes` for work issued on `stream` (the legacy default stream when null).
  // RESOURCE_EXHAUSTED when the device is out of memory; other CUDA errors as cuda_status.h.
  absl::StatusOr<void*> Get(size_t bytes, cudaStream_t stream);
  size_t capacity() const { return capacity_; }

  // The size a request for `bytes` allocates: rounded up to 1 MiB, so that a slowly growing
  // demand does not reallocate every time.
  static size_t RoundedSize(size_t bytes);

 private:
  const int device_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
  cudaStream_t stream_ = nullptr;  // of the last Get: where the allocation was last used
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_DEVICE_SCRATCH_H_
