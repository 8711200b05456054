#include "coordinator/node_identities.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::coordinator {

absl::StatusOr<std::unique_ptr<NodeIdentities>> NodeIdentities::Load(JobStore* store) {
  ASSIGN_OR_RETURN(auto stored, store->LoadNodeIdentities());
  std::unique_ptr<NodeIdentities> identities(new NodeIdentities(store));
  absl::MutexLock lock(&identities->mu_);
  for (auto& [node, identity] : stored) identities->holders_[node] = std::move(identity);
  return identities;
}

absl::Status NodeIdentities::Claim(const std::string& node, const std::string& identity) {
  if (identity.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(node);
  if (it != holders_.end()) {
    if (it->second == identity) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", node, " is bound to agent identity \"", it->second, "\"; \"", identity,
        "\" may not register it (an admin can release it: ringctl release-node ", node, ")"));
  }
  RETURN_IF_ERROR(Annotate(store_->PutNodeIdentity(node, identity),
                           absl::StrCat("binding node ", node, " to its agent identity")));
  holders_[node] = identity;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> NodeIdentities::Release(
    const v1::UpdateNodeRequest& request, const Caller& caller) {
  if (!caller.admin && !caller.identity.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("\"", caller.identity,
                     "\" may not release nodes: it needs an admin token (see --tokens)"));
  }
  if (request.node().empty()) return FieldError("node", "must not be empty");
  if (request.action() != v1::NODE_ACTION_UNSPECIFIED) {
    return FieldError("action", "must be unset with release_identity (release, then cordon)");
  }
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(request.node());
  if (it == holders_.end()) return std::nullopt;
  RETURN_IF_ERROR(Annotate(store_->PutNodeIdentity(request.node(), std::nullopt),
                           absl::StrCat("releasing node ", request.node())));
  std::optional<std::string> held = std::move(it->second);
  holders_.erase(it);
  return held;
}

std::optional<std::string> NodeIdentities::HolderOf(const std::string& node) const {
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(node);
  if (it == holders_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ringmaster::coordinator
