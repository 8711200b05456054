// Temporary device memory for kernels that need it (reduction partials, sort space): one
// growable allocation on one device.
//
// Not thread-safe: owned by one user (a device or an operation object) that issues its work on
// one stream. Get() returns at least `bytes`, reusing the current allocation when it is large
// enough. Growing first waits for the whole device (cudaDeviceSynchronize), so work still
// reading the old allocation finishes before it is freed; it happens only while sizes grow
// (the first steps of a run).
#ifndef RINGMASTER_TRAINER_CUDA_DEVICE_SCRATCH_H_
#define RINGMASTER_TRAINER_CUDA_DEVICE_SCRATCH_H_

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

  // RESOURCE_EXHAUSTED when the device is out of memory; other CUDA errors as cuda_status.h.
  absl::StatusOr<void*> Get(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  const int device_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_DEVICE_SCRATCH_H_
