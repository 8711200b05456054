// The rules of UpdateNode (cordon, drain, uncordon; see coordinator.proto), apart from the job
// manager's state: who may do it, what a valid request is, and the cordon it records.
#ifndef RINGMASTER_COORDINATOR_NODE_UPDATE_H_
#define RINGMASTER_COORDINATOR_NODE_UPDATE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/caller.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {

// The longest reason kept with a cordon.
inline constexpr size_t kMaxCordonReasonBytes = 1024;

// PERMISSION_DENIED unless the caller is an admin or anonymous (authentication off: every caller
// may do everything); INVALID_ARGUMENT naming the field for an empty node, an unspecified action
// or a reason over kMaxCordonReasonBytes.
absl::Status ValidateNodeUpdate(const v1::UpdateNodeRequest& request, const Caller& caller);

// The cordon a cordon or drain request records. A node already cordoned keeps when it was
// cordoned, and its reason when the request gives none.
v1::NodeCordon CordonFor(const v1::UpdateNodeRequest& request, const Caller& caller, absl::Time now,
                         const std::optional<v1::NodeCordon>& existing);

// "cordon", "drain", "uncordon".
std::string NodeActionName(v1::NodeAction action);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_NODE_UPDATE_H_
