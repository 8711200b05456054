// JobManager's growing of elastic jobs (JobSpec.min_nodes, spec/elastic.h) back to their full
// size, never onto a settling node (flap damping, flap_damping.h), and the wait for a lost node's
// replacement before shrinking (spec.elastic_wait_seconds). Shrinking itself: TryPlace
// (job_manager_scheduling.cc) places a job that does not fit at spec.nodes at the largest smaller
// size that fits.
#include <map>
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

// `open` without the settling nodes, except the job's own.
std::vector<NodeCapacity> Settled(const std::vector<NodeCapacity>& open,
                                  const std::map<std::string, NodeManager::Settling>& settling,
                                  const v1::JobStatus& own) {
  if (settling.empty()) return open;
  const std::set<std::string> mine = job_manager_internal::NodesOf(own);
  std::vector<NodeCapacity> out;
  for (const NodeCapacity& node : open) {
    if (!settling.count(node.name) || mine.count(node.name)) out.push_back(node);
  }
  return out;
}

// "2m0s" as "2m": whole seconds.
std::string Seconds(absl::Duration d) {
  return absl::FormatDuration(absl::Ceil(d, absl::Seconds(1)));
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
    const std::vector<NodeCapacity> open = FreeOrOwn(usable, nodes_->FreeCapacity(), job->status);
    const absl::StatusOr<Placement> full =
        PlaceBehind(Settled(open, settling_, job->status),
                    hold_.job_id.empty() ? nullptr : &hold_, desired, job->excluded);
    if (!full.ok()) {
      NoteGrowSettling(job, open, desired);
      continue;
    }
    job->grow_waits_for.clear();
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

void JobManager::NoteGrowSettling(Job* job, const std::vector<NodeCapacity>& open,
                                  const Layout& desired) {
  std::set<std::string> needs;  // none: it would not fit with them either, nothing to say
  if (!settling_.empty()) {
    const absl::StatusOr<Placement> with =
        PlaceBehind(open, hold_.job_id.empty() ? nullptr : &hold_, desired, job->excluded);
    const std::set<std::string> mine = job_manager_internal::NodesOf(job->status);
    for (size_t i = 0; with.ok() && i < with->assignments.size(); ++i) {
      const std::string& node = with->assignments[i].node();
      if (settling_.count(node) && !mine.count(node)) needs.insert(node);
    }
  }
  if (needs.empty()) job->grow_waits_for.clear();  // a later wait is said again
  if (needs.empty() || needs == job->grow_waits_for) return;
  job->grow_waits_for = needs;
  std::vector<std::string> why;
  for (const std::string& node : needs) {
    const NodeManager::Settling& s = settling_.at(node);
    why.push_back(absl::StrCat(node, " (lost ", s.losses, " times lately; settles in ",
                               Seconds(s.left), ")"));
  }
  AddEvent(job, "elastic",
           absl::StrCat("not growing DP ", LayoutOf(job->status).data, "→", desired.data,
                        " yet: it needs settling nodes, which drop again too often to be worth a "
                        "checkpoint and restart: ",
                        absl::StrJoin(why, ", ")));
  Persist(job);
}

bool JobManager::EndSettling(absl::Time now) {
  if (now < settled_at_) return false;
  settled_at_ = absl::InfiniteFuture();  // the pass reads the settling nodes again
  return true;
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
