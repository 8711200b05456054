// Rendezvous: one key/value store per (job, generation), with set, get and wait-with-deadline.
// Workers reach it through their agent (RendezvousRequest on the agent stream) to exchange the
// ncclUniqueId and Gloo addresses.
//
// Only the job's current generation has a store. Opening a newer generation drops the older
// store and fails its waiters with FAILED_PRECONDITION; any request naming another generation is
// refused with FAILED_PRECONDITION ("stale generation"), so a worker of an old incarnation can
// neither read nor poison the new one's keys.
//
// Waiting holds no thread: Wait() registers a callback, run when the key is set, when the
// deadline passes (ExpireWaiters, driven by the coordinator's ticker with the injected clock), or
// when the generation is dropped. Callbacks run exactly once, without the manager's lock held,
// on the thread that caused them (Set, ExpireWaiters, OpenGeneration, CloseJob).
//
// Thread-safe.
#ifndef RINGMASTER_COORDINATOR_RENDEZVOUS_MANAGER_H_
#define RINGMASTER_COORDINATOR_RENDEZVOUS_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics/registry.h"

namespace ringmaster::coordinator {

class RendezvousManager {
 public:
  using WaitCallback = std::function<void(absl::StatusOr<std::string>)>;

  static constexpr size_t kMaxKeyBytes = 512;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  static constexpr size_t kMaxKeysPerGeneration = 1 << 20;
  // Keys and values of one generation together (a worker looping over new keys would otherwise
  // grow the coordinator's memory without bound).
  static constexpr size_t kMaxBytesPerGeneration = 64 << 20;
  // Waits of one generation not answered yet: four for each of 65,536 ranks (a worker looping
  // over waits that never end would otherwise do the same; each costs a few hundred bytes).
  static constexpr int64_t kMaxWaitersPerGeneration = 1 << 18;

  // `clock` must outlive the manager. `registry` (may be null) receives
  // ringmaster_rendezvous_wait_seconds, ringmaster_rendezvous_requests_total{op,code} and
  // ringmaster_rendezvous_waiters{job_id} (removed when the job is closed).
  RendezvousManager(Clock* clock, metrics::Registry* registry);

  // Makes `generation` the job's current one with an empty store. Older generations' waiters get
  // FAILED_PRECONDITION. Opening a generation lower than the current one is refused
  // (FAILED_PRECONDITION); reopening the current one is a no-op.
  absl::Status OpenGeneration(const std::string& job_id, int64_t generation);

  // Drops the job's store (job terminal); its waiters get FAILED_PRECONDITION.
  void CloseJob(const std::string& job_id);

  // Stores `value` under `key` (overwrites) and wakes the key's waiters.
  // INVALID_ARGUMENT for an empty/oversized key or oversized value; FAILED_PRECONDITION for an
  // unknown job or a stale generation; RESOURCE_EXHAUSTED past kMaxKeysPerGeneration or
  // kMaxBytesPerGeneration.
  absl::Status Set(const std::string& job_id, int64_t generation, const std::string& key,
                   std::string value);

  // The value under `key`; NOT_FOUND if unset; errors as for Set (for the key).
  absl::StatusOr<std::string> Get(const std::string& job_id, int64_t generation,
                                  const std::string& key);

  // Calls `done` with the value once `key` is set, or DEADLINE_EXCEEDED once `deadline` passes
  // (checked by ExpireWaiters), or the Set errors at once, or RESOURCE_EXHAUSTED at once when
  // the generation already has kMaxWaitersPerGeneration waits. May call `done` before returning.
  // `owner` (an agent stream; 0: none) lets CancelOwner drop the wait.
  void Wait(const std::string& job_id, int64_t generation, const std::string& key,
            absl::Time deadline, WaitCallback done, uint64_t owner = 0);

  // Drops every registered wait of `owner` (not 0) without calling it back: its stream is gone,
  // and the agent asks again on its next stream (agent/rendezvous_replay.h). Returns how many.
  int CancelOwner(uint64_t owner);

  // Fails every waiter whose deadline is <= clock->Now(). Returns how many expired.
  int ExpireWaiters();

  // Waiters currently registered (for tests and metrics).
  int64_t PendingWaiters() const;
  // Entries of the stores' lists of waiters by key: PendingWaiters(), since an expired or
  // cancelled wait leaves no trace (for tests).
  int64_t ListedWaiters() const;

 private:
  struct Waiter {
    absl::Time start;
    WaitCallback done;
    std::string job_id;
    std::string key;
    uint64_t owner = 0;
    std::multimap<absl::Time, uint64_t>::iterator deadline_entry;
  };
  struct Store {
    int64_t generation = 0;
    absl::flat_hash_map<std::string, std::string> values;
    size_t bytes = 0;  // of the keys and values
    // Ids of the registered waiters by key, in arrival order (ids only grow); keys without
    // waiters have no entry.
    absl::flat_hash_map<std::string, absl::btree_set<uint64_t>> waiters_by_key;
  };
  using Fired = std::vector<std::pair<WaitCallback, absl::StatusOr<std::string>>>;

  absl::Status CheckGeneration(const std::string& job_id, int64_t generation, Store** store)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::Status CheckKey(const std::string& key);
  // Stores `value` under `key` within the generation's limits, waking the key's waiters.
  absl::Status Put(const std::string& job_id, Store* store, const std::string& key,
                   std::string value, Fired* fired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every waiter of `store` into `fired` with `status`.
  void FailAll(Store* store, const absl::Status& status, Fired* fired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes waiter `id` (if still registered) and queues its callback with `result`. Leaves its
  // entry in the store's waiters_by_key to the caller.
  void Fire(uint64_t id, absl::StatusOr<std::string> result, Fired* fired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `waiter` (id `id`) from its store's waiters_by_key.
  void Unlist(uint64_t id, const Waiter& waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(Fired fired);
  void Count(const char* op, const absl::Status& status);
  // Adds `change` to the job's registered waiters and exports the count.
  void CountWaiter(const std::string& job_id, int change) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  metrics::HistogramFamily* wait_seconds_ = nullptr;
  metrics::CounterFamily* requests_ = nullptr;
  metrics::GaugeFamily* waiters_gauge_ = nullptr;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Store> stores_ ABSL_GUARDED_BY(mu_);
  // Every waiter by id, and ids by deadline for expiry in deadline order.
  absl::flat_hash_map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> waiting_ ABSL_GUARDED_BY(mu_);  // waiters by job
  std::multimap<absl::Time, uint64_t> by_deadline_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_RENDEZVOUS_MANAGER_H_
