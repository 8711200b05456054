// The scheduler's decisions for waiting jobs: one scheduling pass places them one by one on the
// free devices (the job manager tries RESTARTING jobs, then PENDING ones, each in submission
// order), holds devices for the first that does not fit (JobManagerOptions::
// hold_devices_for_oldest_pending) and says why each other waits. An elastic job (min_nodes) that
// does not fit may be tried again at smaller sizes in the same pass: its own hold does not hold
// it back, and it is dropped once the job is placed. Also the crash-loop backoff.
//
// Threading: a SchedulingPass is used by one thread (the job manager's, under its job lock) and
// lives for one pass; the free functions are pure. Ownership: the pass borrows the NodeManager,
// which must outlive it. Errors: Place() answers with an Outcome, never a Status; PlaceBehind
// returns RESOURCE_EXHAUSTED (a user's reason to wait) or placement.h's other errors.
#ifndef RINGMASTER_COORDINATOR_SCHEDULER_H_
#define RINGMASTER_COORDINATOR_SCHEDULER_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/node_manager.h"
#include "coordinator/placement.h"

namespace ringmaster::coordinator {

// Devices held for the first job of a scheduling pass that does not fit.
struct Hold {
  std::string job_id;   // empty: none held
  Placement placement;  // where that job would run once enough frees up (PlaceOnceFree)
};

// "node-a (8 devices), node-b (8 devices)": the nodes of a placement and its devices on each;
// past the first 8 nodes, how many more.
std::string HeldNodes(const Placement& placement);

// Places `layout` on `free` less the devices `hold` keeps (none: null), off the `excluded` and
// `settling` nodes if it can, else off the settling ones (an excluded node is used again before a
// settling one), else anywhere. RESOURCE_EXHAUSTED when
// it does not fit, its message what a user reads: waiting behind the holder when the held devices
// are all it lacks, else what is missing and what is held.
absl::StatusOr<Placement> PlaceBehind(const std::vector<NodeCapacity>& free, const Hold* hold,
                                      const Layout& layout, const std::set<std::string>& excluded,
                                      const std::set<std::string>& settling = {});

// How many of the hold's devices are in `free` (the rest still run another job).
int IdleHeldDevices(const Hold& hold, const std::vector<NodeCapacity>& free);

// How long the next launch waits after `failures` generations in a row failed before their
// first step: nothing for fewer than 2 (or a zero `base`), then `base`, doubling per further
// failure, at most `max`.
absl::Duration CrashLoopBackoff(int failures, absl::Duration base, absl::Duration max);

// One scheduling pass. The free devices are read from the nodes once (again after Forget) and
// then updated with each placement; until they change, a job shaped like one that did not fit
// (same layout, hold and avoided nodes) gets that one's answer without being placed again.
class SchedulingPass {
 public:
  // `hold_for_oldest_pending`: the first job that does not fit holds devices (see above).
  SchedulingPass(NodeManager* nodes, bool hold_for_oldest_pending);

  // What the pass needs of a waiting job.
  struct Candidate {
    std::string job_id;
    Layout layout;
    // PENDING (false: RESTARTING, a running job between generations, which takes any free
    // device, held ones included).
    bool pending = false;
    const std::set<std::string>* excluded = nullptr;  // nodes it avoids while others fit; not null
    // Nodes settling after repeated losses (flap_damping.h), avoided like `excluded` and before
    // them (null: none).
    const std::set<std::string>* settling = nullptr;
  };
  struct Outcome {
    enum Kind {
      kPlaced,       // `placement`, its devices allocated to the job on the node manager
      kWaiting,      // `reason`: why it waits (JobStatus.reason)
      kUnplaceable,  // `reason`: why it can never be placed (the job fails)
      kRefused,      // the node manager refused the allocation (a node was lost or left
                     // meanwhile): the devices are read again, it may be tried once more
    };
    Kind kind = kWaiting;
    Placement placement;
    std::string reason;
  };
  Outcome Place(const Candidate& job);

  // Devices were freed or taken outside the pass's own bookkeeping: read them again.
  void Forget();
  // Allocations the node manager refused so far.
  int refused() const { return refused_; }
  // The hold as the pass left it (no job_id: none).
  const Hold& hold() const { return hold_; }

 private:
  NodeManager* const nodes_;
  const bool hold_for_oldest_pending_;
  Hold hold_;
  std::optional<std::vector<NodeCapacity>> free_;  // unset: read from the nodes at next use
  std::map<std::string, absl::Status> misfits_;    // PlaceBehind's answer, by shape
  std::set<std::string> never_fit_;                // shapes PlaceOnceFree cannot place
  // Cordoned nodes, read at first use (cordons change only under the job lock).
  std::optional<std::vector<std::string>> cordoned_;
  int refused_ = 0;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_SCHEDULER_H_
