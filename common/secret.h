// Secrets shared between two local processes (the agent and a worker it launched): drawn from
// the kernel's random generator, compared in a time that does not depend on their contents.
#ifndef RINGMASTER_COMMON_SECRET_H_
#define RINGMASTER_COMMON_SECRET_H_

#include <string>

#include "absl/status/statusor.h"

namespace ringmaster {

// 128 bits from getrandom(2), as 32 lowercase hex digits. UNAVAILABLE if the kernel refuses.
absl::StatusOr<std::string> NewSecret();

// a == b, in a time that depends only on their lengths.
bool SameSecret(const std::string& a, const std::string& b);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_SECRET_H_
