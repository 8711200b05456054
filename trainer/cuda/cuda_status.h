// absl::Status from the CUDA runtime's and cuBLAS's error codes: the one place they are mapped
// (NCCL's are in nccl_status.h). The codes follow common/status.h's exit-code contract:
//  - out of device memory: RESOURCE_EXHAUSTED (retryable: a restart may land elsewhere);
//  - no device, no or an insufficient driver, device unavailable: UNAVAILABLE (retryable: the
//    agent advertised a GPU this process cannot use, a node fault the coordinator can route
//    around by excluding the node);
//  - anything else (a kernel fault, an illegal address, an ECC error, a bad argument): INTERNAL
//    (retryable; a programming error then fails the job once its restarts are used up).
// Messages name the operation, the error's name and its description.
#ifndef RINGMASTER_TRAINER_CUDA_CUDA_STATUS_H_
#define RINGMASTER_TRAINER_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ringmaster::trainer {

absl::StatusCode CudaErrorCode(cudaError_t err);
// OK for cudaSuccess; otherwise "<what>: <cudaGetErrorName>: <cudaGetErrorString>". A failure
// turned into a Status is handled, so it is also cleared from the runtime's per-thread last
// error, which would otherwise be reported by the next kernel launch on this thread.
absl::Status CudaStatus(cudaError_t err, absl::string_view what);

absl::StatusCode CublasErrorCode(cublasStatus_t status);
// OK for CUBLAS_STATUS_SUCCESS; otherwise "<what>: <cublasGetStatusName>: <cublasGetStatusString>".
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_CUDA_STATUS_H_
