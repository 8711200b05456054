#include "coordinator/node_manager.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace ringmaster::coordinator {

NodeManager::NodeManager(Clock* clock, absl::Duration lost_after, absl::Duration forget_after,
                         metrics::Registry* registry)
    : clock_(clock), lost_after_(lost_after), forget_after_(forget_after) {
  if (registry != nullptr) {
    connected_ =
        registry->AddGauge("ringmaster_agents_connected", "Agents registered and heartbeating now.")
            .WithLabels({});
    lost_total_ = &registry->AddCounter(
        "ringmaster_nodes_lost_total",
        "Times the node was declared lost (stream ended or heartbeats stopped), not counting a "
        "stream that ended after its agent said it was leaving; 0 from its first registration, "
        "so that increase() counts its first loss.",
        {"node"});
    left_total_ = &registry->AddCounter(
        "ringmaster_nodes_left_total",
        "Times the node's stream ended after its agent said it was leaving (a planned restart, "
        "an upgrade, a scale-down): not a loss; 0 from its first registration.",
        {"node"});
    connected_gauge_ = &registry->AddGauge(
        "ringmaster_node_connected",
        "1 while the node's agent is registered and heartbeating, 0 while it is lost or left "
        "(until it returns, or is forgotten after --forget_lost_node_after).",
        {"node"});
    settling_gauge_ = &registry->AddGauge(
        "ringmaster_node_settling_seconds",
        "Seconds the node has left settling after repeated losses (flap damping: elastic grows "
        "and spares keep off it); 0 when it is not settling.",
        {"node"});
    cordoned_gauge_ = &registry->AddGauge(
        "ringmaster_node_cordoned",
        "1 while the node is cordoned (ringctl cordon/drain): nothing new is placed on it.",
        {"node"});
    stall_seconds_ =
        registry
            ->AddHistogram("ringmaster_coordinator_stall_seconds",
                           "Stalls of the coordinator (paused, or busy): the longest time it "
                           "read no agent message while its liveness checks were late, less one "
                           "period; not counted as the nodes' silence.",
                           {}, {0.25, 0.5, 1, 2, 5, 10, 30, 60, 300})
            .WithLabels({});
  }
}

absl::Status NodeManager::ValidateRegistration(const v1::Register& registration) {
  if (registration.node().empty()) return FieldError("register.node", "must not be empty");
  if (registration.devices().empty()) {
    return FieldError("register.devices", "a node must report at least one device");
  }
  absl::flat_hash_set<int> seen;
  for (const v1::Device& d : registration.devices()) {
    if (!seen.insert(d.index()).second) {
      return FieldError("register.devices.index", absl::StrCat("duplicate index ", d.index()));
    }
    if (d.kind() != "gpu" && d.kind() != "cpu") {
      return FieldError("register.devices.kind",
                        absl::StrCat("must be \"gpu\" or \"cpu\", got \"", d.kind(), "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> NodeManager::Register(const v1::Register& registration) {
  RETURN_IF_ERROR(ValidateRegistration(registration));
  absl::flat_hash_set<int> seen;
  for (const v1::Device& d : registration.devices()) seen.insert(d.index());
  absl::MutexLock lock(&mu_);
  Node& node = nodes_[registration.node()];
  if (lost_total_ != nullptr && node.lost == nullptr) {
    node.lost = lost_total_->WithLabels({registration.node()});
    node.left = left_total_->WithLabels({registration.node()});
    node.settling = settling_gauge_->WithLabels({registration.node()});
    node.connected = connected_gauge_->WithLabels({registration.node()});
  }
  if (node.connected != nullptr) node.connected->Set(1);
  if (!node.alive) {
    ++alive_;
    // Back after a loss (or new): flap damping counts from here. A session replaced while the
    // node was alive never made it unavailable.
    node.flaps.Registered(clock_->Now());
  }
  node.registration = registration;
  node.session = next_session_++;
  node.alive = true;
  node.leaving = registration.has_leaving();
  node.last_heartbeat = node.silent_since = clock_->Now();
  node.paused_since.reset();
  NoteReadLocked(node.last_heartbeat);
  // Devices that disappeared cannot stay held; the job manager restarts jobs that used them.
  for (auto it = node.holder.begin(); it != node.holder.end();) {
    auto next = std::next(it);
    if (!seen.contains(it->first)) node.holder.erase(it);
    it = next;
  }
  UpdateGauge();
  return node.session;
}

NodeManager::Node* NodeManager::SessionLocked(const std::string& name, uint64_t session) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || it->second.session != session || !it->second.alive) return nullptr;
  return &it->second;
}

void NodeManager::NoteReadLocked(absl::Time now) {
  // A pause before the first check is a stall too: the measurement starts with the first read.
  if (!last_tick_.has_value()) last_tick_ = now;
  const absl::Time from = std::max(last_read_, *last_tick_);
  longest_unread_ = std::max(longest_unread_, now - from);
  last_read_ = now;
}

absl::Status NodeManager::Heartbeat(const std::string& name, uint64_t session) {
  absl::MutexLock lock(&mu_);
  Node* node = SessionLocked(name, session);
  if (node == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("heartbeat from ", name, " on a replaced or lost session"));
  }
  node->last_heartbeat = node->silent_since = clock_->Now();
  NoteReadLocked(node->last_heartbeat);
  return absl::OkStatus();
}

bool NodeManager::IsCurrent(const std::string& name, uint64_t session) {
  absl::MutexLock lock(&mu_);
  return SessionLocked(name, session) != nullptr;
}

void NodeManager::StreamPaused(const std::string& name, uint64_t session) {
  absl::MutexLock lock(&mu_);
  Node* node = SessionLocked(name, session);
  if (node == nullptr) return;
  node->paused_since = clock_->Now();
  NoteReadLocked(*node->paused_since);
}

void NodeManager::StreamResumed(const std::string& name, uint64_t session) {
  absl::MutexLock lock(&mu_);
  Node* node = SessionLocked(name, session);
  if (node == nullptr || !node->paused_since.has_value()) return;
  const absl::Time now = clock_->Now();
  node->silent_since = std::min(node->silent_since + (now - *node->paused_since), now);
  node->paused_since.reset();
}

bool NodeManager::Disconnected(const std::string& name, uint64_t session) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end() || it->second.session != session || !it->second.alive) return false;
  MarkLost(&it->second, /*silent=*/false);
  UpdateGauge();
  disconnected_.push_back(name);
  return true;
}

std::vector<std::string> NodeManager::TakeDisconnected() {
  absl::MutexLock lock(&mu_);
  return std::exchange(disconnected_, {});
}

void NodeManager::MarkLost(Node* node, bool silent) {
  node->alive = false;
  node->lost_at = clock_->Now();
  --alive_;
  if (node->connected) node->connected->Set(0);
  // A node that said it was leaving (a planned restart, an upgrade) did not flap. One whose
  // stream then ended went as planned (no RingmasterAgentLost page for a rolling upgrade); one
  // that fell silent while leaving died on the way, and is lost.
  if (!node->leaving) node->flaps.Lost(node->lost_at, damping_);
  if (node->leaving && !silent) {
    if (node->left) node->left->Increment();
  } else if (node->lost) {
    node->lost->Increment();
  }
}

std::vector<std::string> NodeManager::CheckLiveness() {
  absl::MutexLock lock(&mu_);
  return CheckLivenessLocked(clock_->Now());
}

std::vector<std::string> NodeManager::CheckLivenessLocked(absl::Time now) {
  std::vector<std::string> lost;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    auto& [name, node] = *it;
    if (node.alive && !node.paused_since.has_value() && node.silent_since < now - lost_after_) {
      MarkLost(&node, /*silent=*/true);
      lost.push_back(name);
    } else if (!node.alive && forget_after_ > absl::ZeroDuration() && node.holder.empty() &&
               now - node.lost_at >= forget_after_) {
      RM_LOG(INFO) << "node " << name << " lost for " << forget_after_ << ": forgotten";
      if (lost_total_ != nullptr) {
        lost_total_->Remove({name});
        left_total_->Remove({name});
        settling_gauge_->Remove({name});
        connected_gauge_->Remove({name});
      }
      nodes_.erase(it++);
      continue;
    }
    if (node.settling != nullptr) {
      const std::optional<absl::Time> until =
          node.alive ? node.flaps.SettlingUntil(now, damping_) : std::nullopt;
      node.settling->Set(until.has_value() ? absl::ToDoubleSeconds(*until - now) : 0);
    }
    ++it;
  }
  if (!lost.empty()) UpdateGauge();
  std::sort(lost.begin(), lost.end());
  return lost;
}

std::vector<std::string> NodeManager::CheckLivenessEvery(absl::Duration period) {
  absl::Duration stall;
  std::vector<std::string> lost;
  {
    // One lock and one reading of the clock for both the stall and the silences: a pause between
    // two readings would be counted as silence without being seen as a stall.
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (last_tick_.has_value() && now - *last_tick_ > 2 * period) {
      const absl::Duration unread =
          std::max(longest_unread_, now - std::max(last_read_, *last_tick_));
      stall = std::max(unread - period, absl::ZeroDuration());
    }
    last_tick_ = now;
    longest_unread_ = absl::ZeroDuration();
    if (stall > absl::ZeroDuration()) {
      for (auto& [name, node] : nodes_) {
        if (node.alive) node.silent_since = std::min(node.silent_since + stall, now);
      }
      if (stall_seconds_ != nullptr) stall_seconds_->Observe(absl::ToDoubleSeconds(stall));
    }
    lost = CheckLivenessLocked(now);
  }
  // The short ones of an overloaded coordinator are counted, not logged each time.
  if (stall >= lost_after_ / 4 && stall > absl::ZeroDuration()) {
    RM_LOG(WARNING) << "coordinator stalled for " << absl::Trunc(stall, absl::Milliseconds(1))
                    << " (read no agent message): not counted as any node's silence";
  }
  return lost;
}

void NodeManager::SetLeaving(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it != nodes_.end()) it->second.leaving = true;
}

int64_t NodeManager::SmallestGpuMemory() const {
  int64_t smallest = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, node] : nodes_) {
    if (!node.alive) continue;
    for (const v1::Device& d : node.registration.devices()) {
      if (d.kind() != "gpu" || d.memory_bytes() <= 0) continue;
      if (smallest == 0 || d.memory_bytes() < smallest) smallest = d.memory_bytes();
    }
  }
  return smallest;
}

std::vector<NodeCapacity> NodeManager::Capacity(bool free_only) const {
  std::vector<NodeCapacity> out;
  absl::MutexLock lock(&mu_);
  out.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) {
    if (!node.alive || node.leaving || cordons_.contains(name)) continue;
    NodeCapacity capacity;
    capacity.name = name;
    for (const v1::Device& d : node.registration.devices()) {
      if (!free_only || !node.holder.contains(d.index())) {
        capacity.free.push_back({d.index(), d.interconnect_domain()});
      }
    }
    if (!capacity.free.empty()) out.push_back(std::move(capacity));
  }
  std::sort(out.begin(), out.end(),
            [](const NodeCapacity& a, const NodeCapacity& b) { return a.name < b.name; });
  return out;
}

absl::Status NodeManager::Allocate(const std::string& job_id, const Placement& placement) {
  absl::MutexLock lock(&mu_);
  return AllocateLocked(job_id, placement, /*usable_only=*/true);
}

absl::Status NodeManager::AllocateLocked(const std::string& job_id, const Placement& placement,
                                         bool usable_only) {
  for (const v1::RankAssignment& a : placement.assignments) {
    auto it = nodes_.find(a.node());
    bool known = it != nodes_.end() &&
                 std::any_of(it->second.registration.devices().begin(),
                             it->second.registration.devices().end(),
                             [&](const v1::Device& d) { return d.index() == a.local_device(); });
    if (!known) {
      return absl::FailedPreconditionError(
          absl::StrCat("device ", a.local_device(), " of node ", a.node(), " is unknown"));
    }
    if (usable_only && (!it->second.alive || it->second.leaving || cordons_.contains(a.node()))) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", a.node(), " is lost, leaving or cordoned"));
    }
    auto held = it->second.holder.find(a.local_device());
    if (held != it->second.holder.end() && held->second != job_id) {
      return absl::FailedPreconditionError(absl::StrCat("device ", a.local_device(), " of node ",
                                                        a.node(), " is held by ", held->second));
    }
  }
  for (const v1::RankAssignment& a : placement.assignments) {
    nodes_[a.node()].holder[a.local_device()] = job_id;
  }
  return absl::OkStatus();
}

absl::Status NodeManager::Adopt(const std::string& job_id, const std::string& node, int device) {
  Placement one;
  v1::RankAssignment& a = one.assignments.emplace_back();
  a.set_node(node);
  a.set_local_device(device);
  absl::MutexLock lock(&mu_);
  return AllocateLocked(job_id, one, /*usable_only=*/false);
}

void NodeManager::Release(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, node] : nodes_) {
    for (auto it = node.holder.begin(); it != node.holder.end();) {
      auto next = std::next(it);
      if (it->second == job_id) node.holder.erase(it);
      it = next;
    }
  }
}

void NodeManager::Release(const std::string& job_id, const std::string& node, int device) {
  absl::MutexLock lock(&mu_);
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return;
  auto held = n->second.holder.find(device);
  if (held != n->second.holder.end() && held->second == job_id) n->second.holder.erase(held);
}

bool NodeManager::IsAlive(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  return it != nodes_.end() && it->second.alive;
}

std::optional<std::string> NodeManager::HostAddress(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.registration.host_address();
}

std::optional<absl::Duration> NodeManager::SilentFor(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  return clock_->Now() - it->second.last_heartbeat;
}

void NodeManager::SetCordon(const std::string& name, std::optional<v1::NodeCordon> cordon) {
  absl::MutexLock lock(&mu_);
  if (cordon.has_value()) {
    cordons_[name] = *std::move(cordon);
    if (cordoned_gauge_ != nullptr) cordoned_gauge_->WithLabels({name})->Set(1);
  } else {
    cordons_.erase(name);
    if (cordoned_gauge_ != nullptr) cordoned_gauge_->Remove({name});
  }
}

std::optional<v1::NodeCordon> NodeManager::CordonOf(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = cordons_.find(name);
  if (it == cordons_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> NodeManager::Cordoned() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, cordon] : cordons_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

v1::NodeStatus NodeManager::StatusOf(const std::string& name, const Node* node,
                                     absl::Time now) const {
  v1::NodeStatus s;
  s.set_name(name);
  auto cordon = cordons_.find(name);
  if (cordon != cordons_.end()) *s.mutable_cordon() = cordon->second;
  if (node == nullptr) return s;
  s.set_leaving(node->leaving);
  s.set_devices(node->registration.devices_size());
  s.set_devices_in_use(static_cast<int>(node->holder.size()));
  s.set_device_kind(node->registration.devices().empty() ? ""
                                                         : node->registration.devices(0).kind());
  s.set_alive(node->alive);
  s.set_last_heartbeat_age_seconds(absl::ToDoubleSeconds(now - node->last_heartbeat));
  s.set_recent_losses(node->flaps.RecentLosses(now, damping_));
  if (node->alive) {
    if (std::optional<absl::Time> until = node->flaps.SettlingUntil(now, damping_)) {
      s.set_settling_seconds(absl::ToDoubleSeconds(*until - now));
    }
  }
  absl::flat_hash_set<std::string> jobs;
  for (const auto& [device, job] : node->holder) jobs.insert(job);
  std::vector<std::string> sorted(jobs.begin(), jobs.end());
  std::sort(sorted.begin(), sorted.end());
  for (auto& j : sorted) s.add_jobs(j);
  return s;
}

std::vector<v1::NodeStatus> NodeManager::List() const {
  std::vector<v1::NodeStatus> out;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (const auto& [name, node] : nodes_) out.push_back(StatusOf(name, &node, now));
  for (const auto& [name, cordon] : cordons_) {
    if (!nodes_.contains(name)) out.push_back(StatusOf(name, nullptr, now));
  }
  std::sort(out.begin(), out.end(),
            [](const v1::NodeStatus& a, const v1::NodeStatus& b) { return a.name() < b.name(); });
  return out;
}

absl::StatusOr<v1::NodeStatus> NodeManager::Status(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end() && !cordons_.contains(name)) {
    return absl::NotFoundError(
        absl::StrCat("node \"", name, "\" is not known (ringctl nodes lists the nodes)"));
  }
  return StatusOf(name, it == nodes_.end() ? nullptr : &it->second, clock_->Now());
}

int NodeManager::AliveCount() const {
  absl::MutexLock lock(&mu_);
  return alive_;
}

void NodeManager::SetFlapDamping(const FlapDamping& damping) {
  absl::MutexLock lock(&mu_);
  damping_ = damping;
}

std::map<std::string, NodeManager::Settling> NodeManager::SettlingNodes() const {
  std::map<std::string, Settling> out;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (const auto& [name, node] : nodes_) {
    if (!node.alive) continue;
    if (std::optional<absl::Time> until = node.flaps.SettlingUntil(now, damping_)) {
      out[name] = Settling{*until - now, node.flaps.RecentLosses(now, damping_)};
    }
  }
  return out;
}

void NodeManager::UpdateGauge() {
  if (connected_) connected_->Set(alive_);
}

}  // namespace ringmaster::coordinator
