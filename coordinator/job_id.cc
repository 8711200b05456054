#include "coordinator/job_id.h"

#include "absl/strings/str_format.h"

namespace ringmaster::coordinator {

std::string NewJobId(const std::string& name, const std::function<uint64_t()>& random,
                     const std::function<bool(const std::string&)>& taken) {
  constexpr int kTriesPerWidth = 8;
  for (int attempt = 0;; ++attempt) {
    const uint64_t r = random();
    std::string id;
    if (attempt < kTriesPerWidth) {
      id = absl::StrFormat("%s-%04x", name, r & 0xffff);
    } else if (attempt < 2 * kTriesPerWidth) {
      id = absl::StrFormat("%s-%08x", name, r & 0xffffffff);
    } else {
      id = absl::StrFormat("%s-%016x", name, r);
    }
    if (!taken(id)) return id;
  }
}

}  // namespace ringmaster::coordinator
