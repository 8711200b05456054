// NCCL's vocabulary in Ringmaster's terms: result codes as absl::Status (the one place they are
// mapped) and element types.
//
// Codes follow common/status.h's exit-code contract; every NCCL failure a restart can fix is
// retryable:
//  - ncclSystemError (sockets, shared memory, the network) and ncclRemoteError (a peer failed or
//    went away): UNAVAILABLE;
//  - ncclUnhandledCudaError, ncclInternalError, ncclInvalidUsage (also what a communicator in an
//    error state answers) and an unexpected ncclInProgress: INTERNAL;
//  - ncclInvalidArgument (a bad pointer, count or type from this code): INVALID_ARGUMENT, fatal.
#ifndef RINGMASTER_TRAINER_CUDA_NCCL_TYPES_H_
#define RINGMASTER_TRAINER_CUDA_NCCL_TYPES_H_

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainer/model/tensor.h"

namespace ringmaster::trainer {

absl::StatusCode NcclErrorCode(ncclResult_t result);
// OK for ncclSuccess; otherwise "<what>: <ncclGetErrorString> (<ncclGetLastError>)".
absl::Status NcclStatus(ncclResult_t result, absl::string_view what);

// kF32 -> ncclFloat32, kBF16 -> ncclBfloat16, kI32 -> ncclInt32.
ncclDataType_t NcclDataType(DType dtype);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_NCCL_TYPES_H_
