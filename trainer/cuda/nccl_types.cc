#include "trainer/cuda/nccl_types.h"

#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {

absl::StatusCode NcclErrorCode(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return absl::StatusCode::kOk;
    case ncclSystemError:
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status NcclStatus(ncclResult_t result, absl::string_view what) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", ncclGetErrorString(result));
  // The last error's detail (thread-local in NCCL; may be empty).
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && detail[0] != '\0') absl::StrAppend(&message, " (", detail, ")");
  return absl::Status(NcclErrorCode(result), message);
}

ncclDataType_t NcclDataType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
  }
  return ncclFloat32;
}

}  // namespace ringmaster::trainer
