// JobManager's hot spares (JobSpec.spares): idle nodes held for a running job, each with the job's
// devices_per_node devices allocated on the node manager to the holder "<job id>/spare", so no
// other job is placed on them. HoldSpares, after each scheduling pass (the waiting jobs, and the
// devices held for the first of them, come first), keeps each running job's spares alive, off
// its own, its excluded and the settling nodes (flap_damping.h), and takes more while free nodes
// allow; it lets them go when the job ends (before the pass, so that the nodes are free for it).
// A job relaunched after losing a
// node has its spares' devices freed just before it is placed (ReleaseSparesForLaunch), so its
// next generation takes them at once; SparesUsed then says which spare replaced which node, and
// the next HoldSpares refills the pool.
//
// Each spare's agent hears of it (v1.PrepareWorkers, docs/agent.md): when a node becomes the job's
// spare, the job's spec and the devices held, so it can pre-start the job's launch; when it is let
// go (the job ended, or the node is lost, excluded or no longer wanted), count 0, so it drops what
// it prepared. A spare the job's relaunch takes gets no such message: the LaunchWorkers that
// follows uses what was prepared. Sending is best effort (AgentCommandSink::Send): a spare whose
// agent restarted while held is prepared again only when it is taken again.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/scheduler.h"

namespace ringmaster::coordinator {
namespace {

using job_manager_internal::NodesOf;

std::string SpareHolder(const std::string& job_id) { return absl::StrCat(job_id, "/spare"); }

// Whether the job may hold spares now: it runs, or is between generations.
bool Active(const v1::JobStatus& status) {
  return status.state() == v1::JOB_STATE_RUNNING || status.state() == v1::JOB_STATE_RESTARTING;
}

// The PrepareWorkers for a spare of `status` on `devices` (empty, with count 0: drop).
v1::CoordinatorMessage Prepare(const v1::JobStatus& status, const std::vector<int>& devices) {
  v1::CoordinatorMessage message;
  v1::PrepareWorkers* prepare = message.mutable_prepare();
  prepare->set_job_id(status.job_id());
  if (devices.empty()) return message;
  *prepare->mutable_spec() = status.spec();
  prepare->set_count(static_cast<int>(devices.size()));
  for (int d : devices) prepare->add_devices(d);
  return message;
}

}  // namespace

JobManager::SpareSwap JobManager::ReleaseSparesForLaunch(Job* job, SchedulingPass* pass) {
  SpareSwap swap;
  if (job->status.spare_nodes().empty()) return swap;
  swap.before = NodesOf(job->status);
  for (const std::string& node : job->status.spare_nodes()) swap.spares.push_back(node);
  nodes_->Release(SpareHolder(job->status.job_id()));
  job->status.clear_spare_nodes();
  pass->Forget();
  return swap;
}

void JobManager::SparesUsed(Job* job, const SpareSwap& swap) {
  if (swap.spares.empty() || job->status.state() != v1::JOB_STATE_RUNNING) return;
  const std::set<std::string> now = NodesOf(job->status);
  std::vector<std::string> gone;
  for (const std::string& node : swap.before) {
    if (!now.count(node)) gone.push_back(node);
  }
  size_t next = 0;
  for (const std::string& spare : swap.spares) {
    if (!now.count(spare)) continue;
    const std::string replaced = next < gone.size() ? gone[next++] : "";
    AddEvent(job, "spare",
             replaced.empty() ? absl::StrCat("spare ", spare, " taken")
                              : absl::StrCat("spare ", spare, " replaced ", replaced));
  }
}

void JobManager::DropReleasedSpares(const Job& job, const SpareSwap& swap) {
  const std::set<std::string> own = NodesOf(job.status);
  const auto& held = job.status.spare_nodes();
  for (const std::string& spare : swap.spares) {
    if (own.count(spare) || std::find(held.begin(), held.end(), spare) != held.end()) continue;
    agents_->Send(spare, Prepare(job.status, {}));
  }
}

void JobManager::HoldSpares(bool refill) {
  std::set<std::pair<std::string, int>> held;  // for the first waiting job: a spare comes after
  for (const v1::RankAssignment& a : hold_.placement.assignments) {
    held.emplace(a.node(), a.local_device());
  }
  for (const std::string& id : order_) {
    Job* job = Find(id);
    v1::JobStatus& status = job->status;
    const int want = Active(status) ? status.spec().spares() : 0;
    if (want == 0 && status.spare_nodes().empty()) continue;
    if (!refill && want > 0) continue;
    // Taken again from scratch, the job's current spares first: so a spare lost, excluded or
    // become one of the job's nodes is replaced, and the holds are there again after a
    // coordinator restart (the node manager's allocations are not stored).
    const std::string holder = SpareHolder(id);
    nodes_->Release(holder);
    const std::vector<std::string> before(status.spare_nodes().begin(), status.spare_nodes().end());
    std::vector<NodeCapacity> free = nodes_->FreeCapacity();
    std::stable_partition(free.begin(), free.end(), [&](const NodeCapacity& n) {
      return std::find(before.begin(), before.end(), n.name) != before.end();
    });
    const std::set<std::string> own = NodesOf(status);
    const int per_node = status.spec().devices_per_node();
    std::vector<std::string> now;
    std::map<std::string, std::vector<int>> devices;  // held per node, for PrepareWorkers
    for (const NodeCapacity& node : free) {
      if (static_cast<int>(now.size()) >= want) break;
      if (own.count(node.name) || job->excluded.count(node.name) || settling_.count(node.name)) {
        continue;
      }
      Placement placement;
      for (const FreeDevice& d : node.free) {
        if (static_cast<int>(placement.assignments.size()) == per_node) break;
        if (held.count({node.name, d.index})) continue;
        v1::RankAssignment& a = placement.assignments.emplace_back();
        a.set_node(node.name);
        a.set_local_device(d.index);
      }
      if (static_cast<int>(placement.assignments.size()) < per_node) continue;
      if (absl::Status allocated = nodes_->Allocate(holder, placement); !allocated.ok()) {
        RM_LOG(WARNING) << "spare " << node.name << " for " << id << ": " << allocated;
        continue;
      }
      now.push_back(node.name);
      for (const v1::RankAssignment& a : placement.assignments) {
        devices[node.name].push_back(a.local_device());
      }
    }
    if (now == before) continue;
    std::vector<std::string> taken, gone;
    for (const std::string& node : now) {
      if (std::find(before.begin(), before.end(), node) == before.end()) taken.push_back(node);
    }
    for (const std::string& node : before) {
      if (std::find(now.begin(), now.end(), node) == now.end()) gone.push_back(node);
    }
    for (const std::string& node : taken) agents_->Send(node, Prepare(status, devices[node]));
    for (const std::string& node : gone) agents_->Send(node, Prepare(status, {}));
    status.clear_spare_nodes();
    for (const std::string& node : now) status.add_spare_nodes(node);
    std::string what;
    if (!taken.empty()) absl::StrAppend(&what, "holding ", absl::StrJoin(taken, ", "));
    if (!gone.empty()) {
      absl::StrAppend(&what, what.empty() ? "" : "; ", "let go ", absl::StrJoin(gone, ", "));
    }
    if (!what.empty()) {
      absl::StrAppend(&what, " (", now.size(), " of ", want, " spares held)");
      AddEvent(job, "spare", what);
    }
    Persist(job);
  }
}

}  // namespace ringmaster::coordinator
