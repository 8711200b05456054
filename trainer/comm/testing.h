// Test helpers: ranks as threads of one process, connected by Gloo over loopback through an
// in-memory store.
#ifndef RINGMASTER_TRAINER_COMM_TESTING_H_
#define RINGMASTER_TRAINER_COMM_TESTING_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/key_value_store.h"

namespace ringmaster::trainer::testing {

// Runs body(rank) on `ranks` threads at once and returns each rank's status.
std::vector<absl::Status> RunRanks(int ranks, const std::function<absl::Status(int rank)>& body);

// Connects `rank` of `size` to group `name` over loopback through `store` (as a full mesh, or
// with `ring` as a ring: GlooNetwork::ConnectRing).
absl::StatusOr<std::unique_ptr<Communicator>> ConnectLoopback(
    const std::string& name, int rank, int size, KeyValueStore* store,
    absl::Duration timeout = absl::Seconds(30), bool ring = false);

}  // namespace ringmaster::trainer::testing

#endif  // RINGMASTER_TRAINER_COMM_TESTING_H_
