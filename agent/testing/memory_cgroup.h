// A memory cgroup for a test, made as a child of this process's memory cgroup, with a memory limit
// and no swap, so that the kernel's OOM killer can be made to act on processes moved into it.
//
// Made only where this process may: root with a cgroup v1 memory controller (the usual case on
// these machines), or cgroup v2 where the memory controller is enabled for the children of this
// process's cgroup (rare: v2 allows that only for a cgroup without processes of its own, so tests
// skip on most v2 hosts). Not thread-safe.
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
  // "NAME-PID" under this process's memory cgroup (stale ones of dead test processes are removed
  // first). FAILED_PRECONDITION, saying why, where no such cgroup can be made, limited and kept
  // out of swap.
  static absl::StatusOr<std::unique_ptr<MemoryCgroup>> Make(const std::string& name,
                                                            int64_t limit_bytes);
  // Moves whatever is left in it back to the parent, then removes it (a failure is printed to
  // stderr; the next Make of the same name removes it once empty).
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
