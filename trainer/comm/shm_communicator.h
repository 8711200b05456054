// Collectives among ranks on one machine through a shared-memory segment, instead of TCP over
// loopback: every rank writes its contribution into its slot of the segment, each rank reduces
// its share of the buffer from all slots, and every rank copies the result out. A collective
// costs a few memory copies and two barriers per chunk, where Gloo's TCP transport pushes every
// byte through the kernel twice (about 0.7 GB/s bus bandwidth on the development machine; see
// docs/benchmarks.md). Reductions sum the ranks' slots in rank order, so every rank gets the same
// bits.
//
// The segment: rank 0 creates it (shm_open with a unique name it publishes through the
// KeyValueStore), the others map it, and rank 0 unlinks the name once everyone has it mapped,
// so nothing is left in /dev/shm when the processes end. Barriers are a counter and an epoch word
// in the segment, waited on with a short spin and then a (cross-process) futex.
//
// Failures: a wait longer than the timeout is DEADLINE_EXCEEDED; a peer process that no longer
// exists (checked while waiting) is UNAVAILABLE. Point-to-point operations go to the Gloo
// communicator given as `peer_to_peer`.
#ifndef RINGMASTER_TRAINER_COMM_SHM_COMMUNICATOR_H_
#define RINGMASTER_TRAINER_COMM_SHM_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/key_value_store.h"

namespace ringmaster::trainer {

struct ShmOptions {
  // Floats each rank's slot holds; larger buffers are processed in chunks of this size.
  int64_t slot_floats = 1 << 20;
  absl::Duration timeout = absl::Minutes(10);
};

// Joins group `name` (rank of size) through a shared-memory segment. Every member must be on
// this machine. `peer_to_peer` (the same group over Gloo) serves Send/Recv and the attach
// barrier; it must have the same name, rank and size.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectSharedMemory(
    const std::string& name, int rank, int size, KeyValueStore* store,
    std::unique_ptr<Communicator> peer_to_peer, ShmOptions options = {});

// This machine's identity: the kernel's boot id and the host name (two agents on one machine
// share it; two machines never do).
std::string MachineIdentity();
// What ranks compare to decide whether they share memory: MachineIdentity() and, when not empty,
// the node the coordinator placed the rank on (RINGMASTER_NODE), so that two agents on one
// machine (in separate network namespaces, say) are two nodes to the transport as they are to
// the placement and the link check. Empty `node`: MachineIdentity() alone.
std::string NodeIdentity(const std::string& node);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_COMM_SHM_COMMUNICATOR_H_
