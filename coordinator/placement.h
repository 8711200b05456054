// Placement: a pure function from (free devices per node, job layout, excluded nodes) to rank
// assignments and parallel groups. No I/O, no clock, no locks: deterministic for its inputs.
//
// Rank numbering (stable, part of the API): rank = (dp * PP + pp) * TP + tp.
//
// Rules:
//  - The job gets exactly `layout.nodes` nodes and `layout.devices_per_node` devices on each.
//  - Each TP group (TP consecutive ranks) lies on one node, inside one fast-interconnect domain.
//  - Ranks are laid onto nodes stage-major (for pp: for dp: for tp), so pipeline stages land on
//    different nodes whenever DP*TP >= devices_per_node, and a node holds TP groups of one stage
//    (different DP replicas) before it holds a second stage.
//  - Node choice is best-fit: among usable nodes (not excluded, enough free devices in whole
//    domains), those with the fewest free devices first, ties broken by name; so large nodes stay
//    free for large jobs and the result does not depend on input order.
//  - Within a node, TP groups take devices domain by domain, lowest device index first;
//    local_rank numbers the job's ranks on the node in ascending global-rank order.
#ifndef RINGMASTER_COORDINATOR_PLACEMENT_H_
#define RINGMASTER_COORDINATOR_PLACEMENT_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::coordinator {

// A device that is free on a node.
struct FreeDevice {
  int index = 0;   // Device index on the node (GPU ordinal or CPU slot).
  int domain = 0;  // Fast-interconnect domain on that node.
};

// A node as placement sees it.
struct NodeCapacity {
  std::string name;
  std::vector<FreeDevice> free;  // Any order.
};

// The shape the job asks for. Callers validate it first (ValidateJobSpec); Place() re-checks the
// arithmetic and answers INVALID_ARGUMENT if it does not hold.
struct Layout {
  int nodes = 1;
  int devices_per_node = 1;
  int tensor = 1;
  int pipeline = 1;
  int data = 1;
};

struct Placement {
  std::vector<v1::RankAssignment> assignments;  // Indexed by rank.
  v1::ParallelismGroups groups;
  std::vector<std::string> nodes;  // Nodes used, in the order ranks were laid onto them.
};

// Places the job. Errors:
//  - INVALID_ARGUMENT if tensor*pipeline*data != nodes*devices_per_node or tensor does not divide
//    devices_per_node (message names the field: "parallelism.tensor: ...");
//  - RESOURCE_EXHAUSTED when it does not fit now, with a reason a user can act on, e.g.
//    "needs 4 nodes with 8 free devices in whole interconnect domains of 8 (TP=8); 3 usable
//    (1 excluded)".
absl::StatusOr<Placement> Place(const std::vector<NodeCapacity>& nodes, const Layout& layout,
                                const std::set<std::string>& excluded);

// Where a job that does not fit now would run once enough frees up: placed over every device of
// `usable` (free or held), less the `excluded` nodes, on the shortest prefix of those nodes, taken
// in order of most devices free now (`free`; ties by name), that can hold it; and on each node
// its tensor-parallel groups moved to the whole-domain chunks with the most devices free now.
// What the scheduler holds for the first waiting job: the devices nearest to being free.
// RESOURCE_EXHAUSTED as Place when it would not fit even on every usable device.
absl::StatusOr<Placement> PlaceOnceFree(const std::vector<NodeCapacity>& usable,
                                        const std::vector<NodeCapacity>& free, const Layout& layout,
                                        const std::set<std::string>& excluded);

// Takes the devices `placement` assigns off `nodes`, which is sorted by name (as
// NodeManager::FreeCapacity gives it), visiting only the placement's nodes; nodes left with none
// are dropped.
void TakeDevices(const Placement& placement, std::vector<NodeCapacity>* nodes);

// `nodes` (sorted by name) without the devices `placement` assigns, as TakeDevices.
std::vector<NodeCapacity> WithoutDevicesOf(std::vector<NodeCapacity> nodes,
                                           const Placement& placement);

// The groups of a layout, independent of nodes: tensor groups "tp<dp*PP+pp>", pipeline groups
// "pp<dp*TP+tp>" (ranks in stage order), data groups "dp<pp*TP+tp>" (ranks ascending).
v1::ParallelismGroups MakeGroups(const Layout& layout);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_PLACEMENT_H_
