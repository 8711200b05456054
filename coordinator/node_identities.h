// Which agent identity holds each node name: the first agent identity to register a name holds it
// (stored in the JobStore, so a coordinator restart keeps it) until an admin releases it. Another
// identity registering that name is refused before it can touch the node (AgentService).
//
// Only authenticated agents (a tokens file with `agent` tokens, auth.h) are bound: an anonymous
// agent (identity "") claims nothing and is never refused here.
//
// Thread-safe. Claim and Release write the store under this object's lock (a write may wait up to
// the store's busy timeout); HolderOf reads memory only.
#ifndef RINGMASTER_COORDINATOR_NODE_IDENTITIES_H_
#define RINGMASTER_COORDINATOR_NODE_IDENTITIES_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/caller.h"
#include "coordinator/job_store.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {

class NodeIdentities {
 public:
  // Loads the stored bindings. `store` must outlive the result. The store's error if it cannot
  // read them.
  static absl::StatusOr<std::unique_ptr<NodeIdentities>> Load(JobStore* store);

  // Lets `identity` register `node`: OK if it holds the name, or if nobody does (the binding is
  // stored before this returns), or if `identity` is empty (authentication of agents is off).
  // PERMISSION_DENIED naming the node and the identity that holds it if another one does; the
  // store's error if a new binding could not be stored (nothing is bound then).
  absl::Status Claim(const std::string& node, const std::string& identity);

  // Removes `node`'s binding, for UpdateNode with release_identity (coordinator.proto): the next
  // agent identity to register the name holds it. The node's current stream, if any, is left
  // alone. Returns the identity that held it (nullopt: none; releasing is idempotent).
  // PERMISSION_DENIED unless `caller` is an admin or anonymous (authentication off);
  // INVALID_ARGUMENT naming the field for an empty node or an action given too; the store's
  // error if the removal could not be stored (the binding stays).
  absl::StatusOr<std::optional<std::string>> Release(const v1::UpdateNodeRequest& request,
                                                     const Caller& caller);

  // The identity holding `node`, or nullopt.
  std::optional<std::string> HolderOf(const std::string& node) const;

 private:
  explicit NodeIdentities(JobStore* store) : store_(store) {}

  JobStore* const store_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> holders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_NODE_IDENTITIES_H_
