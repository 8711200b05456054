#include "common/cuda_device_count.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringmaster {
namespace {

// CUDA's integer versions (1000 * major + 10 * minor) as "major.minor".
std::string CudaVersion(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

}  // namespace

absl::StatusOr<int> InterpretCudaDeviceCount(cudaError_t error, int count, int driver_version,
                                             int runtime_version) {
  if (error == cudaSuccess) return count;
  if (error == cudaErrorNoDevice) return 0;
  if (error == cudaErrorInsufficientDriver && driver_version == 0) return 0;  // no driver at all
  std::string versions =
      driver_version == 0
          ? absl::StrCat("no CUDA driver found; the runtime is CUDA ", CudaVersion(runtime_version))
          : absl::StrCat("the driver supports up to CUDA ", CudaVersion(driver_version),
                         ", the runtime is CUDA ", CudaVersion(runtime_version));
  return absl::FailedPreconditionError(absl::StrCat(
      "the CUDA runtime cannot use this machine's GPUs: cudaGetDeviceCount failed with ",
      cudaGetErrorName(error), " (", cudaGetErrorString(error), "); ", versions));
}

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) (void)cudaGetLastError();
  int driver_version = 0;
  int runtime_version = 0;
  if (cudaDriverGetVersion(&driver_version) != cudaSuccess) driver_version = 0;
  if (cudaRuntimeGetVersion(&runtime_version) != cudaSuccess) runtime_version = 0;
  (void)cudaGetLastError();
  return InterpretCudaDeviceCount(error, count, driver_version, runtime_version);
}

}  // namespace ringmaster
