#include "trainer/cuda/device_scratch.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/status.h"
#include "trainer/cuda/cuda_status.h"

namespace ringmaster::trainer {

DeviceScratch::~DeviceScratch() {
  if (data_ != nullptr) {
    // Best effort at teardown: a failure here leaves nothing to recover. The synchronous free
    // (it waits for the device): the stream of the last use may already be destroyed.
    (void)cudaSetDevice(device_);
    (void)cudaFree(data_);
  }
}

size_t DeviceScratch::RoundedSize(size_t bytes) {
  constexpr size_t kMiB = size_t{1} << 20;
  return (std::max<size_t>(bytes, 1) + kMiB - 1) / kMiB * kMiB;
}

absl::StatusOr<void*> DeviceScratch::Get(size_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_ && data_ != nullptr) {
    stream_ = stream;  // documented as one stream; the last one is where a free must wait
    return data_;
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "scratch: cudaSetDevice"));
  if (data_ != nullptr) {
    // Ordered after the work on the stream that last used it; the pool hands the memory out
    // again only once that work is done.
    RETURN_IF_ERROR(CudaStatus(cudaFreeAsync(data_, stream_), "scratch: cudaFreeAsync"));
    data_ = nullptr;
    capacity_ = 0;
  }
  const size_t rounded = RoundedSize(bytes);
  RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&data_, rounded, stream), "scratch: cudaMallocAsync"));
  capacity_ = rounded;
  stream_ = stream;
  return data_;
}

}  // namespace ringmaster::trainer
