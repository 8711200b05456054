// Gloo (TCP) communicators for ranks on CPUs.
//
// A GlooNetwork is the process's TCP endpoint (one listening socket on `hostname`, port chosen by
// the kernel). Connect() builds a full mesh among a group's members through a KeyValueStore:
// every member publishes its pair addresses under "<group>/..." and waits for the others', so no
// port is fixed and nothing goes through files. ConnectRing() connects each member to its two
// ring neighbours only, for groups of thousands that exchange small messages. Under an agent, the
// store is the coordinator's rendezvous for the job's generation, so a stale generation can never
// join.
#ifndef RINGMASTER_TRAINER_COMM_GLOO_COMMUNICATOR_H_
#define RINGMASTER_TRAINER_COMM_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/key_value_store.h"

namespace ringmaster::trainer {

class GlooNetwork {
 public:
  // `hostname` is the address peers reach this process at (the node's address; 127.0.0.1 on
  // one machine). UNAVAILABLE if it cannot be bound.
  static absl::StatusOr<std::shared_ptr<GlooNetwork>> Create(const std::string& hostname);
  virtual ~GlooNetwork() = default;

  // Joins group `name` as `rank` of `size`, waiting up to `timeout` for every member; every
  // operation of the communicator then times out after `timeout` too. Thread-safe; members of
  // several groups join them in the same order.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Connect(const std::string& name, int rank,
                                                                int size, KeyValueStore* store,
                                                                absl::Duration timeout) = 0;

  // Joins group `name` as Connect() does, but connected only to its ring neighbours (rank - 1
  // and rank + 1): the store holds `size` small records instead of size^2 addresses, and each
  // member reads two of them instead of size - 1, so a group of thousands joins at once.
  // Broadcast and all-gather then take size - 1 hops, all-reduce and barrier 2 (size - 1), each
  // passing whole buffers (reduce-scatter is the ring's own in either topology): small messages
  // only. Point-to-point reaches the neighbours only (FAILED_PRECONDITION otherwise).
  virtual absl::StatusOr<std::unique_ptr<Communicator>> ConnectRing(const std::string& name,
                                                                    int rank, int size,
                                                                    KeyValueStore* store,
                                                                    absl::Duration timeout) = 0;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_COMM_GLOO_COMMUNICATOR_H_
