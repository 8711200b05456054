#include "trainer/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {

absl::StatusCode CudaErrorCode(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::Status(CudaErrorCode(err), absl::StrCat(what, ": ", cudaGetErrorName(err), ": ",
                                                       cudaGetErrorString(err)));
}

absl::StatusCode CublasErrorCode(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return absl::StatusCode::kOk;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_NOT_INITIALIZED:  // typically no usable GPU or driver
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::Status(CublasErrorCode(status), absl::StrCat(what, ": ", cublasGetStatusName(status),
                                                            ": ", cublasGetStatusString(status)));
}

}  // namespace ringmaster::trainer
