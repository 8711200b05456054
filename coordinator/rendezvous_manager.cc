#include "coordinator/rendezvous_manager.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::coordinator {
namespace {

absl::Status Stale(const std::string& job_id, int64_t asked, int64_t current) {
  return absl::FailedPreconditionError(absl::StrCat("stale generation ", asked, " of job ", job_id,
                                                    " (current generation is ", current, ")"));
}

}  // namespace

RendezvousManager::RendezvousManager(Clock* clock, metrics::Registry* registry) : clock_(clock) {
  if (registry != nullptr) {
    wait_seconds_ = &registry->AddHistogram(
        "ringmaster_rendezvous_wait_seconds",
        "Time from a rendezvous wait to its answer (value, deadline or refusal).", {},
        metrics::ExponentialBuckets(0.001, 4, 10));
    requests_ =
        &registry->AddCounter("ringmaster_rendezvous_requests_total",
                              "Rendezvous requests by operation and result code.", {"op", "code"});
    waiters_gauge_ = &registry->AddGauge(
        "ringmaster_rendezvous_waiters",
        "Rendezvous waits of the job's current generation not answered yet.", {"job_id"});
  }
}

void RendezvousManager::CountWaiter(const std::string& job_id, int change) {
  const int64_t now = waiting_[job_id] += change;
  if (waiters_gauge_ != nullptr) {
    waiters_gauge_->WithLabels({job_id})->Set(static_cast<double>(now));
  }
}

void RendezvousManager::Count(const char* op, const absl::Status& status) {
  if (requests_ == nullptr) return;
  requests_->WithLabels({op, absl::StatusCodeToString(status.code())})->Increment();
}

absl::Status RendezvousManager::OpenGeneration(const std::string& job_id, int64_t generation) {
  Fired fired;
  absl::Status result = absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    Store& store = stores_[job_id];
    if (generation < store.generation) {
      result = Stale(job_id, generation, store.generation);
    } else if (generation > store.generation) {
      FailAll(&store,
              absl::FailedPreconditionError(absl::StrCat("generation ", store.generation,
                                                         " of job ", job_id, " was replaced")),
              &fired);
      store = Store();
      store.generation = generation;
    }
  }
  Run(std::move(fired));
  return result;
}

void RendezvousManager::CloseJob(const std::string& job_id) {
  Fired fired;
  {
    absl::MutexLock lock(&mu_);
    auto it = stores_.find(job_id);
    if (it == stores_.end()) return;
    FailAll(&it->second, absl::FailedPreconditionError(absl::StrCat("job ", job_id, " ended")),
            &fired);
    stores_.erase(it);
    waiting_.erase(job_id);
    if (waiters_gauge_ != nullptr) waiters_gauge_->Remove({job_id});
  }
  Run(std::move(fired));
}

absl::Status RendezvousManager::CheckGeneration(const std::string& job_id, int64_t generation,
                                                Store** store) {
  auto it = stores_.find(job_id);
  if (it == stores_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " has no rendezvous"));
  }
  if (it->second.generation != generation) {
    return Stale(job_id, generation, it->second.generation);
  }
  *store = &it->second;
  return absl::OkStatus();
}

absl::Status RendezvousManager::CheckKey(const std::string& key) {
  if (!key.empty() && key.size() <= kMaxKeyBytes) return absl::OkStatus();
  return FieldError("key", absl::StrCat("must be 1-", kMaxKeyBytes, " bytes, got ", key.size()));
}

absl::Status RendezvousManager::Set(const std::string& job_id, int64_t generation,
                                    const std::string& key, std::string value) {
  Fired fired;
  absl::Status status = CheckKey(key);
  if (status.ok() && value.size() > kMaxValueBytes) {
    status = FieldError(
        "value", absl::StrCat("must be at most ", kMaxValueBytes, " bytes, got ", value.size()));
  }
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    Store* store = nullptr;
    status = CheckGeneration(job_id, generation, &store);
    if (status.ok()) status = Put(job_id, store, key, std::move(value), &fired);
  }
  Count("set", status);
  Run(std::move(fired));
  return status;
}

absl::Status RendezvousManager::Put(const std::string& job_id, Store* store, const std::string& key,
                                    std::string value, Fired* fired) {
  auto old = store->values.find(key);
  const bool fresh = old == store->values.end();
  if (fresh && store->values.size() >= kMaxKeysPerGeneration) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id, " already has ", kMaxKeysPerGeneration, " keys"));
  }
  const size_t bytes = store->bytes + key.size() + value.size() -
                       (fresh ? 0 : old->first.size() + old->second.size());
  if (bytes > kMaxBytesPerGeneration) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id, "'s rendezvous keys and values would take ", bytes,
                     " bytes, more than ", kMaxBytesPerGeneration));
  }
  auto waiting = store->waiters_by_key.find(key);
  if (waiting != store->waiters_by_key.end()) {
    for (uint64_t id : waiting->second) Fire(id, value, fired);
    store->waiters_by_key.erase(waiting);
  }
  store->values[key] = std::move(value);
  store->bytes = bytes;
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousManager::Get(const std::string& job_id, int64_t generation,
                                                   const std::string& key) {
  absl::StatusOr<std::string> result;
  if (absl::Status bad = CheckKey(key); !bad.ok()) {
    result = bad;
  } else {
    absl::MutexLock lock(&mu_);
    Store* store = nullptr;
    absl::Status status = CheckGeneration(job_id, generation, &store);
    if (!status.ok()) {
      result = status;
    } else {
      auto it = store->values.find(key);
      result = it == store->values.end()
                   ? absl::StatusOr<std::string>(absl::NotFoundError(
                         absl::StrCat("rendezvous key \"", key, "\" is not set")))
                   : absl::StatusOr<std::string>(it->second);
    }
  }
  Count("get", result.status());
  return result;
}

void RendezvousManager::Wait(const std::string& job_id, int64_t generation, const std::string& key,
                             absl::Time deadline, WaitCallback done, uint64_t owner) {
  absl::StatusOr<std::string> immediate;
  if (absl::Status bad = CheckKey(key); !bad.ok()) {
    immediate = bad;
  } else {
    absl::MutexLock lock(&mu_);
    Store* store = nullptr;
    absl::Status status = CheckGeneration(job_id, generation, &store);
    if (!status.ok()) {
      immediate = status;
    } else if (auto it = store->values.find(key); it != store->values.end()) {
      immediate = it->second;
    } else if (int64_t waiting = waiting_[job_id]; waiting >= kMaxWaitersPerGeneration) {
      immediate = absl::ResourceExhaustedError(
          absl::StrCat("job ", job_id, " already has ", waiting,
                       " rendezvous waits not answered yet, the most a generation may have"));
    } else {
      uint64_t id = next_waiter_id_++;
      Waiter& waiter = waiters_[id];
      waiter.start = clock_->Now();
      waiter.done = std::move(done);
      waiter.job_id = job_id;
      waiter.key = key;
      waiter.owner = owner;
      waiter.deadline_entry = by_deadline_.emplace(deadline, id);
      store->waiters_by_key[key].insert(id);
      CountWaiter(job_id, +1);
      return;
    }
  }
  Count("wait", immediate.status());
  if (wait_seconds_ != nullptr) wait_seconds_->WithLabels({})->Observe(0);
  done(std::move(immediate));
}

void RendezvousManager::Unlist(uint64_t id, const Waiter& waiter) {
  auto store = stores_.find(waiter.job_id);
  if (store == stores_.end()) return;
  auto listed = store->second.waiters_by_key.find(waiter.key);
  if (listed == store->second.waiters_by_key.end()) return;
  listed->second.erase(id);
  if (listed->second.empty()) store->second.waiters_by_key.erase(listed);
}

void RendezvousManager::Fire(uint64_t id, absl::StatusOr<std::string> result, Fired* fired) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  if (wait_seconds_ != nullptr) {
    wait_seconds_->WithLabels({})->Observe(absl::ToDoubleSeconds(clock_->Now() - it->second.start));
  }
  Count("wait", result.status());
  by_deadline_.erase(it->second.deadline_entry);
  CountWaiter(it->second.job_id, -1);
  fired->emplace_back(std::move(it->second.done), std::move(result));
  waiters_.erase(it);
}

void RendezvousManager::FailAll(Store* store, const absl::Status& status, Fired* fired) {
  for (auto& [key, ids] : store->waiters_by_key) {
    for (uint64_t id : ids) Fire(id, status, fired);
  }
  store->waiters_by_key.clear();
}

int RendezvousManager::ExpireWaiters() {
  Fired fired;
  {
    absl::MutexLock lock(&mu_);
    absl::Time now = clock_->Now();
    while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
      const uint64_t id = by_deadline_.begin()->second;
      Unlist(id, waiters_.at(id));
      Fire(id, absl::DeadlineExceededError("rendezvous wait deadline passed"), &fired);
    }
  }
  int expired = static_cast<int>(fired.size());
  Run(std::move(fired));
  return expired;
}

int RendezvousManager::CancelOwner(uint64_t owner) {
  if (owner == 0) return 0;
  int cancelled = 0;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto next = std::next(it);
      if (it->second.owner == owner) {
        Unlist(it->first, it->second);
        by_deadline_.erase(it->second.deadline_entry);
        CountWaiter(it->second.job_id, -1);
        waiters_.erase(it);
        ++cancelled;
      }
      it = next;
    }
  }
  for (int i = 0; i < cancelled; ++i) Count("wait", absl::CancelledError());
  return cancelled;
}

int64_t RendezvousManager::PendingWaiters() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waiters_.size());
}

int64_t RendezvousManager::ListedWaiters() const {
  absl::MutexLock lock(&mu_);
  int64_t listed = 0;
  for (const auto& [job_id, store] : stores_) {
    for (const auto& [key, ids] : store.waiters_by_key) listed += static_cast<int64_t>(ids.size());
  }
  return listed;
}

void RendezvousManager::Run(Fired fired) {
  for (auto& [done, result] : fired) done(std::move(result));
}

}  // namespace ringmaster::coordinator
