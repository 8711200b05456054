// Test helpers: ranks as threads of one process, connected by Gloo over loopback through an
// in-memory store; a communicator whose every operation is slowed, as over a slow link.
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

// Wraps `inner` (same name, rank and size) so that each operation (Barrier and AnyOf included)
// first sleeps `delay`, inside the operation, as a transfer over a slow link would take longer:
// the time counts in Communicator::ThreadSeconds and the totals as the operation's. Point to point
// and collectives go to `inner` afterwards.
std::unique_ptr<Communicator> WithDelay(std::unique_ptr<Communicator> inner, absl::Duration delay);

// Seconds the calling thread has spent in WithDelay's operations since it started: the delays
// and the operations themselves (waits for peers included).
double SecondsInDelayedOperations();

}  // namespace ringmaster::trainer::testing

#endif  // RINGMASTER_TRAINER_COMM_TESTING_H_
