// Status helpers shared by every Ringmaster component.
//
// Deep code returns absl::Status / absl::StatusOr<T>. Conversion to grpc::Status happens only in
// grpc_status.h, at the transport boundary; conversion to a process exit code only in main().
#ifndef RINGMASTER_COMMON_STATUS_H_
#define RINGMASTER_COMMON_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringmaster {

// Returns INVALID_ARGUMENT with the message "<field>: <rule>", the form every validation error
// takes, e.g. FieldError("parallelism.tensor", "must divide devices_per_node (8), got 3").
absl::Status FieldError(absl::string_view field, absl::string_view rule);

// Returns `status` with `context` prepended to its message ("context: message"); OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

// Returns absl::ErrnoToStatus-style status for a failed system call: "<what>: <strerror(errnum)>".
absl::Status ErrnoError(int errnum, absl::string_view what);

// Process exit codes that the agent acts on (see docs/architecture.md).
enum ExitCode : int {
  kExitOk = 0,
  // A failure worth a restart (lost peer, NCCL/Gloo error, timeout).
  kExitRetryable = 75,  // EX_TEMPFAIL
  // A failure a restart cannot fix (bad arguments, bad config).
  kExitFatal = 78,  // EX_CONFIG
};

// Maps a Status that reached main() to an exit code: OK -> 0; UNAVAILABLE, ABORTED,
// DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL -> retryable; everything else -> fatal.
int ExitCodeFor(const absl::Status& status);

}  // namespace ringmaster

#define RM_STATUS_CONCAT_INNER_(a, b) a##b
#define RM_STATUS_CONCAT_(a, b) RM_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status rm_status_ = (expr);      \
    if (!rm_status_.ok()) return rm_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` assigns the value of a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  RM_ASSIGN_OR_RETURN_IMPL_(RM_STATUS_CONCAT_(rm_statusor_, __LINE__), lhs, expr)
#define RM_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

#endif  // RINGMASTER_COMMON_STATUS_H_
