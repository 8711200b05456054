#include "coordinator/node_update.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::coordinator {

absl::Status ValidateNodeUpdate(const v1::UpdateNodeRequest& request, const Caller& caller) {
  if (!caller.admin && !caller.identity.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("\"", caller.identity, "\" may not ", NodeActionName(request.action()),
                     " nodes: changing a node needs an admin token (see --tokens)"));
  }
  if (request.node().empty()) return FieldError("node", "must not be empty");
  if (request.action() != v1::NODE_ACTION_CORDON && request.action() != v1::NODE_ACTION_DRAIN &&
      request.action() != v1::NODE_ACTION_UNCORDON) {
    return FieldError("action", absl::StrCat("must be cordon, drain or uncordon, got ",
                                             static_cast<int>(request.action())));
  }
  if (request.reason().size() > kMaxCordonReasonBytes) {
    return FieldError("reason", absl::StrCat("must be at most ", kMaxCordonReasonBytes,
                                             " bytes, got ", request.reason().size()));
  }
  return absl::OkStatus();
}

v1::NodeCordon CordonFor(const v1::UpdateNodeRequest& request, const Caller& caller, absl::Time now,
                         const std::optional<v1::NodeCordon>& existing) {
  v1::NodeCordon cordon = existing.value_or(v1::NodeCordon());
  if (!existing.has_value()) cordon.set_since_unix_nanos(absl::ToUnixNanos(now));
  if (!request.reason().empty() || !existing.has_value()) cordon.set_reason(request.reason());
  cordon.set_by(caller.identity);
  return cordon;
}

std::string NodeActionName(v1::NodeAction action) {
  switch (action) {
    case v1::NODE_ACTION_CORDON:
      return "cordon";
    case v1::NODE_ACTION_DRAIN:
      return "drain";
    case v1::NODE_ACTION_UNCORDON:
      return "uncordon";
    default:
      return "change";
  }
}

}  // namespace ringmaster::coordinator
