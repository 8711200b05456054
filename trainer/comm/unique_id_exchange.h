// Distributing a group's bootstrap token (NCCL's ncclUniqueId) through the rendezvous store:
// rank 0 of the group makes it and publishes it, every other member waits for it. Under an
// agent the store is the coordinator's key/value store of the job's generation
// (worker/agent_client.h), so a token of another generation can never be read.
//
// The key is "<prefix>/<group>/unique_id"; the value is the token in lowercase hex (the store's
// values are opaque, but hex keeps them printable in logs and safe in any transport).
#ifndef RINGMASTER_TRAINER_COMM_UNIQUE_ID_EXCHANGE_H_
#define RINGMASTER_TRAINER_COMM_UNIQUE_ID_EXCHANGE_H_

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/key_value_store.h"

namespace ringmaster::trainer {

// The key under which group `group`'s token is published.
std::string UniqueIdKey(const std::string& prefix, const std::string& group);

// Returns the group's token (raw bytes, `id_bytes` long) on every member. Rank 0 calls `make`
// (only rank 0 does) and publishes its result; the others wait up to `timeout` for it.
// Errors: `make`'s error on rank 0; DEADLINE_EXCEEDED when rank 0 did not publish in time (it is
// gone or late: retryable); DATA_LOSS when the published value is not hex of `id_bytes` bytes;
// INVALID_ARGUMENT for a rank outside [0, size); the store's errors otherwise.
absl::StatusOr<std::string> ExchangeUniqueId(
    KeyValueStore* store, const std::string& prefix, const std::string& group, int rank, int size,
    size_t id_bytes, const std::function<absl::StatusOr<std::string>()>& make,
    absl::Duration timeout);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_COMM_UNIQUE_ID_EXCHANGE_H_
