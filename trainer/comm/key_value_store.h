// The rendezvous store communicators are built from: the coordinator's per-(job, generation)
// key/value store as the agent serves it (worker/agent_client.h), or an in-memory store for
// ranks that are threads of one process (tests, single-process runs).
#ifndef RINGMASTER_TRAINER_COMM_KEY_VALUE_STORE_H_
#define RINGMASTER_TRAINER_COMM_KEY_VALUE_STORE_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ringmaster::trainer {

// Thread-safe. Values are opaque bytes; a key, once set, may be overwritten.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to `timeout` for it to be set; DEADLINE_EXCEEDED after that.
  virtual absl::StatusOr<std::string> Wait(const std::string& key, absl::Duration timeout) = 0;
};

// A store in this process's memory.
class InMemoryStore final : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Wait(const std::string& key, absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_COMM_KEY_VALUE_STORE_H_
