// JobManager's growing of elastic jobs (JobSpec.min_nodes, spec/elastic.h) back to their full
// size, and the wait for a lost node's replacement before shrinking (spec.elastic_wait_seconds).
// Shrinking itself: TryPlace (job_manager_scheduling.cc) places a job that does not fit at
// spec.nodes at the largest smaller size that fits.
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/launch_plan.h"
#include "coordinator/scheduler.h"
#include "spec/elastic.h"

namespace ringmaster::coordinator {
namespace {

// The devices of `usable` that are free or the job's own (`own`: its assignments).
std::vector<NodeCapacity> FreeOrOwn(const std::vector<NodeCapacity>& usable,
                                    const std::vector<NodeCapacity>& free,
                                    const v1::JobStatus& own) {
  std::set<std::pair<std::string, int>> take;
  for (const NodeCapacity& node : free) {
    for (const FreeDevice& d : node.free) take.emplace(node.name, d.index);
  }
  for (const v1::RankAssignment& a : own.assignments()) take.emplace(a.node(), a.local_device());
  std::vector<NodeCapacity> out;
  for (const NodeCapacity& node : usable) {
    NodeCapacity kept{node.name, {}};
    for (const FreeDevice& d : node.free) {
      if (take.count({node.name, d.index})) kept.free.push_back(d);
    }
    if (!kept.free.empty()) out.push_back(std::move(kept));
  }
  return out;
}

}  // namespace

void JobManager::GrowElasticJobs() {
  std::vector<Job*> shrunk;
  for (const std::string& id : order_) {
    Job* job = Find(id);
    const v1::JobStatus& s = job->status;
    if (s.state() == v1::JOB_STATE_RUNNING && s.elastic_nodes() != 0 && s.generation_stepped() &&
        s.stopping_ranks().empty()) {
      shrunk.push_back(job);
    }
  }
  if (shrunk.empty()) return;
  const std::vector<NodeCapacity> usable = nodes_->UsableCapacity();
  for (Job* job : shrunk) {
    const Layout desired = DesiredLayoutOf(job->status);
    const absl::StatusOr<Placement> full =
        PlaceBehind(FreeOrOwn(usable, nodes_->FreeCapacity(), job->status),
                    hold_.job_id.empty() ? nullptr : &hold_, desired, job->excluded);
    if (!full.ok()) continue;
    const Layout now = LayoutOf(job->status);
    const std::string why =
        absl::StrCat("growing DP ", now.data, "→", desired.data, ": ", desired.nodes,
                     " nodes fit again; checkpointing to relaunch at the full size");
    AddEvent(job, "elastic", why);
    // As a drain: every running rank writes a checkpoint and exits, and the next launch, from
    // that checkpoint, waits for their exits (or the grace).
    MoveOffNode(job, "", why, options_.drain_checkpoint_grace_seconds);
  }
}

bool JobManager::InElasticWait(const Job& job, absl::Time now) {
  const int64_t until = job.status.elastic_wait_until_unix_nanos();
  return until > 0 && now < absl::FromUnixNanos(until);
}

bool JobManager::WaitForReplacement(Job* job, const std::string& reason) {
  const v1::JobSpec& spec = job->status.spec();
  const absl::Time now = clock_->Now();
  if (spec.elastic_wait_seconds() <= 0 || spec::MinNodes(spec) >= spec.nodes()) return false;
  if (job->status.elastic_wait_until_unix_nanos() > 0) return InElasticWait(*job, now);
  std::vector<std::string> gone = GoneNodes(*job);
  if (gone.empty()) return false;  // its first launch, or a restart that lost no node
  for (std::string& g : gone) {
    g = absl::StrReplaceAll(g, {{"node ", ""}, {" lost", ""}, {" excluded", " (excluded)"}});
  }
  const absl::Time until = now + absl::Seconds(spec.elastic_wait_seconds());
  job->status.set_elastic_wait_until_unix_nanos(absl::ToUnixNanos(until));
  job->launch_not_before = until;
  const std::string waiting =
      absl::StrCat("waiting up to ", spec.elastic_wait_seconds(), "s for a replacement for ",
                   absl::StrJoin(gone, ", "), " before shrinking");
  AddEvent(job, "elastic", waiting);
  job->status.set_reason(absl::StrCat(waiting, " (", reason, ")"));
  Persist(job);
  return true;
}

}  // namespace ringmaster::coordinator
