#include "trainer/cuda/device_scratch.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/status.h"
#include "trainer/cuda/cuda_status.h"

namespace ringmaster::trainer {

DeviceScratch::~DeviceScratch() {
  if (data_ != nullptr) {
    // Best effort at teardown: a failure here leaves nothing to recover.
    (void)cudaSetDevice(device_);
    (void)cudaFree(data_);
  }
}

absl::StatusOr<void*> DeviceScratch::Get(size_t bytes) {
  if (bytes <= capacity_ && data_ != nullptr) return data_;
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "scratch: cudaSetDevice"));
  if (data_ != nullptr) {
    RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "scratch: waiting to grow"));
    RETURN_IF_ERROR(CudaStatus(cudaFree(data_), "scratch: cudaFree"));
    data_ = nullptr;
    capacity_ = 0;
  }
  // Round up to 1 MiB so a slowly growing demand does not reallocate every time.
  const size_t rounded = (std::max<size_t>(bytes, 1) + (1 << 20) - 1) / (1 << 20) * (1 << 20);
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&data_, rounded), "scratch: cudaMalloc"));
  capacity_ = rounded;
  return data_;
}

}  // namespace ringmaster::trainer
