// Nodes: registration, liveness and device allocation.
//
// Each agent stream is a session. Register() starts a new session for the node (replacing any
// older one, whose heartbeats and disconnects are then ignored). A node is lost when its current
// session disconnects, or when it has sent no heartbeat for `lost_after` (CheckLiveness, called by
// the coordinator's ticker), not counting the time the coordinator could not read its stream
// (while a heartbeat cannot be read, its absence says nothing about the node): the time its
// stream was paused (StreamPaused), and the coordinator's own stalls (CheckLivenessEvery).
// Heartbeat() is O(1): one hash lookup and a timestamp store; nothing here touches the disk.
//
// Allocation tracks which job holds which device, so placement sees only free devices of live,
// uncordoned nodes. Allocations survive a node's loss and return (the job manager releases them).
//
// Cordons (set by the job manager, which stores them first) outlive the node's registration: a
// cordoned node that is forgotten and registers again is still cordoned.
//
// Each node's losses are remembered (in memory, until it is forgotten) for flap damping
// (flap_damping.h): a node lost twice or more within the window is *settling* for a while after it
// registers again (Settling(), and NodeStatus.settling_seconds in List()).
//
// Thread-safe.
#ifndef RINGMASTER_COORDINATOR_NODE_MANAGER_H_
#define RINGMASTER_COORDINATOR_NODE_MANAGER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics/registry.h"
#include "coordinator/flap_damping.h"
#include "coordinator/placement.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {

class NodeManager {
 public:
  // `clock` must outlive the manager. `registry` (may be null) receives
  // ringmaster_agents_connected, ringmaster_node_connected{node}, ringmaster_nodes_lost_total{node}
  // (not a node that said it was leaving and whose stream then ended:
  // ringmaster_nodes_left_total{node}), ringmaster_node_settling_seconds{node} (set at each
  // liveness check), ringmaster_node_cordoned{node} and ringmaster_coordinator_stall_seconds. A
  // node lost for `forget_after` that holds no device is forgotten: gone from List() and from the
  // metrics, as if it had never registered (nodes come and go under an autoscaler; zero: kept
  // forever).
  NodeManager(Clock* clock, absl::Duration lost_after, absl::Duration forget_after,
              metrics::Registry* registry);

  // Validates and records a registration; returns the new session id. INVALID_ARGUMENT (naming
  // the field) for an empty node name, no devices, duplicate device indices or a device kind
  // other than "gpu"/"cpu".
  absl::StatusOr<uint64_t> Register(const v1::Register& registration);
  // Register's validation alone, with its errors (for checks that must come between validating a
  // registration and recording it, like the node's agent identity).
  static absl::Status ValidateRegistration(const v1::Register& registration);

  // Records a heartbeat. FAILED_PRECONDITION if `session` is not the node's current session.
  absl::Status Heartbeat(const std::string& node, uint64_t session);

  // Whether `session` is the node's current one and the node is alive.
  bool IsCurrent(const std::string& node, uint64_t session);

  // The session's stream ended. Marks the node lost at once if it is the current session, and
  // returns true in that case: TakeDisconnected then returns the node too, once.
  bool Disconnected(const std::string& node, uint64_t session);
  // The nodes Disconnected marked lost since the previous call, in that order (a node lost twice
  // is there twice). The coordinator's ticker hands them to the job manager, so that a stream's
  // gRPC thread never waits for the job lock; a process that never calls this keeps them all.
  std::vector<std::string> TakeDisconnected();

  // Marks nodes silent for longer than lost_after as lost and returns their names (each lost
  // node is returned once per loss); forgets the nodes lost for forget_after.
  std::vector<std::string> CheckLiveness();
  // The coordinator's ticker (the only caller) calls this every `period` instead. A gap of more
  // than twice `period` since its previous call means the coordinator stalled: the process was
  // paused, or the ticker waited behind the job lock. What counts is how long, within the gap, it
  // read no agent message at all (a paused process reads nothing; one whose ticker waits may go
  // on reading heartbeats): that time, less one period, is not counted as any live node's silence
  // (so each check counts at least one period of a silent node's silence, and it is lost within
  // lost_after / period + 1 checks however the coordinator stalls). The stall is observed in
  // ringmaster_coordinator_stall_seconds and logged from a quarter of lost_after. Then does what
  // CheckLiveness does.
  std::vector<std::string> CheckLivenessEvery(absl::Duration period);

  // The session's stream stopped and started reading again (its messages wait to be handled,
  // which may wait for the job lock; its heartbeats wait unread meanwhile). Until StreamResumed the
  // node is not lost for silence, and the time between the two is not counted as its silence.
  // Other sessions' calls are ignored.
  void StreamPaused(const std::string& node, uint64_t session);
  void StreamResumed(const std::string& node, uint64_t session);

  // Free devices of live nodes that are neither cordoned nor leaving, sorted by node name.
  std::vector<NodeCapacity> FreeCapacity() const { return Capacity(/*free_only=*/true); }
  // Every device of those nodes, free or held: what placement would see once their jobs ended.
  std::vector<NodeCapacity> UsableCapacity() const { return Capacity(/*free_only=*/false); }

  // The memory of the smallest GPU of the live nodes, as their agents registered it; 0 when no
  // live node has a GPU with its memory known (CPU slots have none).
  int64_t SmallestGpuMemory() const;

  // The node's agent is shutting down (v1.Leaving): nothing new is placed on it until it
  // registers again. Unknown nodes are ignored.
  void SetLeaving(const std::string& node);

  // Cordons `node` (nothing new is placed on it) or, with nullopt, uncordons it. Takes any name:
  // the caller checks Status() first, and a stored cordon is restored before its node registers.
  void SetCordon(const std::string& node, std::optional<v1::NodeCordon> cordon);
  std::optional<v1::NodeCordon> CordonOf(const std::string& node) const;
  // Names of the cordoned nodes, sorted.
  std::vector<std::string> Cordoned() const;

  // Marks the placement's devices as held by `job_id`. FAILED_PRECONDITION (nothing changed) if
  // a device is unknown or held by another job, or its node is lost, leaving or cordoned (it
  // changed since the free devices were read).
  absl::Status Allocate(const std::string& job_id, const Placement& placement);

  // Marks (node, device) as held by `job_id`, on any known node, lost, leaving or cordoned too
  // (reconciling a job that survived a coordinator restart; a drain's ranks keeping their devices
  // while they stop). FAILED_PRECONDITION if held by another job or unknown.
  absl::Status Adopt(const std::string& job_id, const std::string& node, int device);

  // Frees every device `job_id` holds.
  void Release(const std::string& job_id);
  // Frees (node, device) if `job_id` holds it.
  void Release(const std::string& job_id, const std::string& node, int device);

  bool IsAlive(const std::string& node) const;
  // The node's host address from its registration, if the node is known.
  std::optional<std::string> HostAddress(const std::string& node) const;
  // How long ago the node last sent a heartbeat (or registered), if the node is known.
  std::optional<absl::Duration> SilentFor(const std::string& node) const;
  // Status of every known node, sorted by name; a cordoned node that is not registered has only
  // its name and cordon.
  std::vector<v1::NodeStatus> List() const;
  // The List() entry of one node; NOT_FOUND unless it is registered (and not forgotten) or
  // cordoned.
  absl::StatusOr<v1::NodeStatus> Status(const std::string& node) const;
  int AliveCount() const;

  // The flap damping rule (the default FlapDamping's until set; a zero hold: none settles).
  void SetFlapDamping(const FlapDamping& damping);
  // A live node that is settling now: how long it has left, and its losses within the window.
  struct Settling {
    absl::Duration left;
    int losses = 0;
  };
  // The live nodes settling now, by name.
  std::map<std::string, Settling> SettlingNodes() const;

 private:
  std::vector<NodeCapacity> Capacity(bool free_only) const;
  struct Node {
    v1::Register registration;
    uint64_t session = 0;
    bool alive = false;
    absl::Time last_heartbeat;
    absl::Time silent_since;  // the last heartbeat, moved later by the time it could not be read
    std::optional<absl::Time> paused_since;        // StreamPaused without StreamResumed yet
    absl::Time lost_at;                            // when it was last declared lost
    bool leaving = false;  // said Leaving since it registered, or in its registration
    absl::flat_hash_map<int, std::string> holder;  // Device index -> job id (held devices).
    std::shared_ptr<metrics::Counter> lost;        // its ringmaster_nodes_lost_total series
    std::shared_ptr<metrics::Counter> left;        // ringmaster_nodes_left_total
    std::shared_ptr<metrics::Gauge> settling;      // ringmaster_node_settling_seconds
    std::shared_ptr<metrics::Gauge> connected;     // ringmaster_node_connected
    FlapHistory flaps;                             // its losses and latest registration
  };

  // `silent`: its heartbeats stopped (else its stream ended).
  void MarkLost(Node* node, bool silent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> CheckLivenessLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An agent message was read now (for the stall measurement of CheckLivenessEvery).
  void NoteReadLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Node* SessionLocked(const std::string& name, uint64_t session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::NodeStatus StatusOf(const std::string& name, const Node* node, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauge() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const absl::Duration lost_after_;
  const absl::Duration forget_after_;
  std::shared_ptr<metrics::Gauge> connected_;
  metrics::CounterFamily* lost_total_ = nullptr;
  metrics::CounterFamily* left_total_ = nullptr;
  metrics::GaugeFamily* settling_gauge_ = nullptr;
  metrics::GaugeFamily* connected_gauge_ = nullptr;
  metrics::GaugeFamily* cordoned_gauge_ = nullptr;
  std::shared_ptr<metrics::Histogram> stall_seconds_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, v1::NodeCordon> cordons_ ABSL_GUARDED_BY(mu_);
  // Allocate, and with `usable_only` false Adopt (a drain's devices stay held while their node
  // leaves).
  absl::Status AllocateLocked(const std::string& job_id, const Placement& placement,
                              bool usable_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  // CheckLivenessEvery's last call; before the first, the first agent message read.
  std::optional<absl::Time> last_tick_ ABSL_GUARDED_BY(mu_);
  absl::Time last_read_ ABSL_GUARDED_BY(mu_);                 // the last agent message read
  // The longest time without a message read since last_tick_ (up to last_read_).
  absl::Duration longest_unread_ ABSL_GUARDED_BY(mu_);
  int alive_ ABSL_GUARDED_BY(mu_) = 0;
  FlapDamping damping_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> disconnected_ ABSL_GUARDED_BY(mu_);  // for TakeDisconnected
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_NODE_MANAGER_H_
