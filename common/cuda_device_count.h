// How many GPUs the CUDA runtime can use, telling "this machine has none" apart from "it has
// some this build cannot use". cudaGetDeviceCount reports both as an error, and the same one
// (cudaErrorInsufficientDriver) for a machine without a driver and for a driver too old for the
// runtime; taking every error for "no GPU" would let a GPU machine with an old driver skip every
// GPU test and offer no GPU, silently. Only where CUDA is built (cuda_only()).
#ifndef RINGMASTER_COMMON_CUDA_DEVICE_COUNT_H_
#define RINGMASTER_COMMON_CUDA_DEVICE_COUNT_H_

#include <cuda_runtime.h>

#include "absl/status/statusor.h"

namespace ringmaster {

// The devices visible to the CUDA runtime (CUDA_VISIBLE_DEVICES applies): 0 when there is no
// device or no driver at all; FAILED_PRECONDITION naming the error and both CUDA versions when
// there is a driver the runtime cannot use (too old) or the runtime fails otherwise. The
// runtime's (non-sticky) error is cleared either way.
absl::StatusOr<int> CudaDeviceCount();

// CudaDeviceCount's decision for cudaGetDeviceCount's `error` and `count`, given the versions
// cudaDriverGetVersion (0: no driver installed) and cudaRuntimeGetVersion report, e.g. 12040.
absl::StatusOr<int> InterpretCudaDeviceCount(cudaError_t error, int count, int driver_version,
                                             int runtime_version);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_CUDA_DEVICE_COUNT_H_
