// The one way the trainer joins a communication group: over Gloo, upgraded to shared memory
// (shm_communicator.h) when every member runs on this machine and on the same node.
// Thread-compatible (one call per group per rank); errors are the transports' (UNAVAILABLE,
// DEADLINE_EXCEEDED: retryable).
#ifndef RINGMASTER_TRAINER_COMM_CONNECT_GROUP_H_
#define RINGMASTER_TRAINER_COMM_CONNECT_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/comm/key_value_store.h"

namespace ringmaster::trainer {

// Connects rank `rank` of `size` to group `name` over Gloo; then, with `shared_memory` and more
// than one member, the members compare identities (NodeIdentity(node): an all-gather) and, when
// they all match, collectives switch to a shared-memory segment (point to point stays on Gloo).
// `node` is the node the coordinator placed this rank on (RINGMASTER_NODE): ranks of different
// nodes never share memory, even on one machine (agents in network namespaces of one host), so
// the bytes take the links that placement, the link check and the diagnosis reason about. Empty
// (a rank run without an agent): the machine alone decides. Every member must pass the same
// `shared_memory`.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGroup(
    GlooNetwork& network, const std::string& name, int rank, int size, KeyValueStore* store,
    absl::Duration timeout, bool shared_memory, const std::string& node = "");

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_COMM_CONNECT_GROUP_H_
