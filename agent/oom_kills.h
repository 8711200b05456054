// Whether the kernel's OOM killer ended a worker. The exit cannot tell (its SIGKILL is any
// SIGKILL, and a program whose child it killed fails its own way), but the kernel counts its OOM
// kills: in the memory cgroup the workers run in (the agent's, which they inherit) and on the
// whole node. A failing exit that comes soon after either count rose is likely out of memory.
//
// The counts, each absent where the kernel or the setup has none (then nothing is claimed):
// - cgroup v1: DIR/memory.oom_control, its "oom_kill N" line (Linux 4.13+; that cgroup's own
//   processes only), DIR being where the "memory" controller's path in ROOT/proc/self/cgroup is
//   mounted;
// - cgroup v2: DIR/memory.events, "oom_kill N" (its descendants' included), for the path of the
//   "0::" line, where no v1 memory controller is listed.
// DIR comes from the cgroup file system's mount in ROOT/proc/self/mountinfo: its mount point
// plus the path less the mount's root (a container without a cgroup namespace sees its own
// cgroup as the root of its mount); without mountinfo, ROOT/sys/fs/cgroup/memory (v1) or
// ROOT/sys/fs/cgroup (v2) plus the path.
// - the node: ROOT/proc/vmstat, "oom_kill N" (Linux 4.13+).
#ifndef RINGMASTER_AGENT_OOM_KILLS_H_
#define RINGMASTER_AGENT_OOM_KILLS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace ringmaster::agent {

struct OomKillCounts {
  std::string cgroup_file;  // where `cgroup` was read ("" for none)
  std::optional<int64_t> cgroup;
  std::optional<int64_t> node;
};

// The file that counts OOM kills in the memory cgroup of process `pid` (a number, or "self"),
// under `root` ("/" on a real system); "" if none is found.
std::string OomKillCounterFile(const std::string& root, const std::string& pid);

// The counts now: the cgroup's from `cgroup_file` ("" for none), the node's from ROOT/proc/vmstat.
OomKillCounts ReadOomKillCounts(const std::string& root, const std::string& cgroup_file);

// Samples the counts (the agent's tick calls Sample, and a launch before its workers start) and
// says, at an exit, whether they rose in the last `window` or so: since the newest sample at least
// `window` old, so up to `window` plus two sampling intervals (more if a tick is late). The
// cgroup's count is used where it can be compared: the agent's cgroup is looked up at every sample
// (it may be moved; Read()) and compared with the oldest sample kept of that cgroup. The kernel
// counts every OOM kill of a process in its cgroup (a node-wide one too), so the node's count is
// only for when there is no such sample: a node-wide rise with the cgroup's count flat killed
// something else. Each kill is told to one exit, the first after it (the victim; its peers fail
// after it): an exit is told of the kills not told yet, and claims one of them. Thread-safe.
class OomKillWatch {
 public:
  // Takes a first sample, of the agent's own counts under `root`.
  OomKillWatch(std::string root, Clock* clock, absl::Duration window = absl::Seconds(10));

  void Sample();

  // For a failing exit now: "" if the count rose by no kill not told yet; else "likely out of
  // memory (the kernel's OOM killer killed N process(es) in the workers' memory cgroup [on this
  // node] in the S s before)", N the kills not told yet, and one of them counts as told.
  std::string RecentKills();

 private:
  // The counts now. The cgroup's counter is located again (OomKillCounterFile, which reads
  // mountinfo: long on a big node) only when /proc/self/cgroup changed or none was found.
  OomKillCounts Read();

  const std::string root_;
  Clock* const clock_;
  const absl::Duration window_;
  absl::Mutex locate_mu_;
  std::string located_for_ ABSL_GUARDED_BY(locate_mu_);   // /proc/self/cgroup as last located
  std::string counter_file_ ABSL_GUARDED_BY(locate_mu_);  // the cgroup's counter found then
  absl::Mutex mu_;
  // Oldest first; the oldest is the only one older than the window.
  std::deque<std::pair<absl::Time, OomKillCounts>> samples_ ABSL_GUARDED_BY(mu_);
  // The counter (file) and its value up to which kills were told to exits.
  std::pair<std::string, int64_t> cgroup_claimed_ ABSL_GUARDED_BY(mu_);
  std::pair<std::string, int64_t> node_claimed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_OOM_KILLS_H_
