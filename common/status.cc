#include "common/status.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ringmaster {

absl::Status FieldError(absl::string_view field, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", rule));
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::Status ErrnoError(int errnum, absl::string_view what) {
  return absl::ErrnoToStatus(errnum, what);
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kInternal:
      return kExitRetryable;
    default:
      return kExitFatal;
  }
}

}  // namespace ringmaster
