// A memory cgroup of its own for a test, beside this process's (cgroup v1 or v2), with a memory
// limit, so that the kernel's OOM killer can be made to act on processes moved into it. Made only
// where this process may (root, a v1 memory controller or a delegated v2 one); tests skip
// otherwise.
#ifndef RINGMASTER_AGENT_TESTING_MEMORY_CGROUP_H_
#define RINGMASTER_AGENT_TESTING_MEMORY_CGROUP_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringmaster::agent {

class MemoryCgroup {
 public:
  // FAILED_PRECONDITION, saying why, where no such cgroup can be made.
  static absl::StatusOr<std::unique_ptr<MemoryCgroup>> Make(const std::string& name,
                                                            int64_t limit_bytes);
  // Moves whatever is left in it back to the parent, then removes it.
  ~MemoryCgroup();

  // Moves process `pid` in (its children to come start in it).
  absl::Status Join(pid_t pid);
  // The file its OOM kills are counted in (memory.oom_control or memory.events).
  std::string counter_file() const { return dir_ + "/" + counter_; }

 private:
  MemoryCgroup(std::string parent, std::string dir, std::string counter)
      : parent_(std::move(parent)), dir_(std::move(dir)), counter_(std::move(counter)) {}
  std::string parent_, dir_, counter_;
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_TESTING_MEMORY_CGROUP_H_
