#include "trainer/comm/key_value_store.h"

#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {

absl::Status InMemoryStore::Set(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Wait(const std::string& key, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return values_.count(key) > 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("rendezvous key \"", key, "\" was not set within ",
                                                    absl::FormatDuration(timeout)));
  }
  return values_[key];
}

}  // namespace ringmaster::trainer
