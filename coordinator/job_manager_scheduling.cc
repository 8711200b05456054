// JobManager's scheduling: a pass over the waiting jobs (SchedulingPass, scheduler.h, decides
// where each goes or why it waits) and the launch of a placed job's next generation (a fresh
// GenerationState, its launches from LaunchPlan, launch_plan.h).
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/launch_plan.h"
#include "coordinator/scheduler.h"
#include "spec/elastic.h"

namespace ringmaster::coordinator {

void JobManager::Schedule() {
  absl::MutexLock lock(&mu_);
  ScheduleLocked();
}

void JobManager::ScheduleLocked() {
  const absl::Time start = absl::Now();  // real time, whatever clock_ is
  // Running jobs between generations first, then the pending ones; each in submission order.
  // (Placing one job changes no other's state.)
  std::vector<Job*> restarting, pending;
  const absl::Time now = clock_->Now();
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (job->status.state() == v1::JOB_STATE_RESTARTING &&
        (now >= job->launch_not_before || InElasticWait(*job, now))) {
      restarting.push_back(job);
    } else if (job->status.state() == v1::JOB_STATE_PENDING) {
      pending.push_back(job);
    }
  }
  HoldSpares(/*refill=*/false);  // an ended job's spares are free for the pass
  settling_ = nodes_->SettlingNodes();
  settling_nodes_.clear();
  settled_at_ = absl::InfiniteFuture();
  for (const auto& [node, settling] : settling_) {
    settling_nodes_.insert(node);
    settled_at_ = std::min(settled_at_, now + settling.left);
  }
  SchedulingPass pass(nodes_, options_.hold_devices_for_oldest_pending);
  auto try_place = [&](Job* job) {
    const int refused = pass.refused();
    // Refused: a node was lost or left since the free devices were read; try once more on
    // devices read again (no later pass may come soon).
    if (!TryPlace(job, &pass) && pass.refused() > refused) TryPlace(job, &pass);
  };
  std::vector<std::pair<Job*, SpareSwap>> swaps;
  for (Job* job : restarting) {
    SpareSwap swap = ReleaseSparesForLaunch(job, &pass);  // its spares: free for it now
    try_place(job);
    SparesUsed(job, swap);
    if (!swap.spares.empty()) swaps.emplace_back(job, std::move(swap));
  }
  for (Job* job : pending) try_place(job);
  ExportHold(pass.hold());
  hold_ = pass.hold();
  HoldSpares(/*refill=*/true);
  for (const auto& [job, swap] : swaps) DropReleasedSpares(*job, swap);
  GrowElasticJobs();
  metrics_.ObserveSchedulingPass(absl::Now() - start);
}

void JobManager::ExportHold(const Hold& hold) {
  if (!metrics_.enabled()) return;
  // Read again, not the pass's: a node may have been lost during the pass.
  const int idle = hold.job_id.empty() ? 0 : IdleHeldDevices(hold, nodes_->FreeCapacity());
  const int held = static_cast<int>(hold.placement.assignments.size());
  metrics_.SetHold(hold_.job_id, hold.job_id, idle, held - idle);
}

namespace {

// The "elastic" event of a job placed on `nodes` (its current generation's size is in its status;
// none yet before its first launch): "shrunk DP 4→2: node n3 lost, no spare (REASON)", "grew DP
// 2→4", or "started at DP 2 of 4: REASON". `reason`: why the desired size does not fit.
// `cause`: what took the node, e.g. "node n3 lost, no spare; " (may be empty).
std::string ElasticChange(const v1::JobStatus& status, const std::string& cause,
                          const Layout& desired, int nodes, const std::string& reason) {
  const int from = LayoutOf(status).data;
  const int to = LayoutAtNodes(desired, nodes).data;
  const std::string sizes = absl::StrCat(" (", LayoutOf(status).nodes, "→", nodes, " nodes)");
  if (to >= desired.data) return absl::StrCat("grew DP ", from, "→", to, sizes);
  if (status.generation() == 0) {
    return absl::StrCat("started at DP ", to, " of ", desired.data, " on ", nodes,
                        " nodes: ", reason);
  }
  return absl::StrCat("shrunk DP ", from, "→", to, sizes, ": ", cause, reason);
}

}  // namespace

std::vector<std::string> JobManager::GoneNodes(const Job& job) const {
  std::vector<std::string> gone;
  if (job.status.generation() == 0) return gone;
  // The previous generation's nodes (its assignments until the launch) that it cannot have back.
  for (const std::string& node : job_manager_internal::NodesOf(job.status)) {
    if (!nodes_->IsAlive(node)) {
      gone.push_back(absl::StrCat("node ", node, " lost"));
    } else if (job.excluded.count(node)) {
      gone.push_back(absl::StrCat("node ", node, " excluded"));
    }
  }
  return gone;
}

std::string JobManager::ElasticCause(const Job& job) const {
  const std::vector<std::string> gone = GoneNodes(job);
  return gone.empty() ? "" : absl::StrCat(absl::StrJoin(gone, ", "), ", no spare; ");
}

bool JobManager::TryPlace(Job* job, SchedulingPass* pass) {
  // Ranks of a drain that have not exited by now were SIGKILLed: their devices are free.
  if (!job->status.stopping_ranks().empty()) {
    nodes_->Release(job->status.job_id());
    pass->Forget();
  }
  const Layout desired = DesiredLayoutOf(job->status);
  const bool pending = job->status.state() == v1::JOB_STATE_PENDING;
  SchedulingPass::Outcome outcome =
      pass->Place({job->status.job_id(), desired, pending, &job->excluded, &settling_nodes_});
  int nodes = desired.nodes;
  if (outcome.kind == SchedulingPass::Outcome::kWaiting &&
      !WaitForReplacement(job, outcome.reason)) {
    // An elastic job that cannot get all its nodes now runs on the largest size that fits.
    for (const spec::ElasticSize& size : spec::ReachableSizes(job->status.spec(), desired.data)) {
      if (size.nodes == desired.nodes) continue;
      SchedulingPass::Outcome smaller = pass->Place(
          {job->status.job_id(), LayoutAtNodes(desired, size.nodes), pending, &job->excluded,
           &settling_nodes_});
      if (smaller.kind == SchedulingPass::Outcome::kRefused) return false;
      if (smaller.kind != SchedulingPass::Outcome::kPlaced) continue;
      AddEvent(job, "elastic",
               ElasticChange(job->status, ElasticCause(*job), desired, size.nodes, outcome.reason));
      outcome = std::move(smaller);
      nodes = size.nodes;
      break;
    }
  }
  switch (outcome.kind) {
    case SchedulingPass::Outcome::kWaiting:
      if (InElasticWait(*job, clock_->Now())) return false;  // its reason says the wait
      if (outcome.reason != job->status.reason()) {
        job->status.set_reason(outcome.reason);
        Persist(job);
      }
      return false;
    case SchedulingPass::Outcome::kUnplaceable:
      Fail(job, absl::StrCat("cannot be placed: ", outcome.reason), /*fatal=*/true, clock_->Now(),
           "");
      pass->Forget();  // it may have had devices
      return false;
    case SchedulingPass::Outcome::kRefused:
      return false;
    case SchedulingPass::Outcome::kPlaced:
      if (nodes == desired.nodes && job->status.elastic_nodes() != 0) {
        AddEvent(job, "elastic", ElasticChange(job->status, "", desired, nodes, ""));
      }
      job->status.set_elastic_nodes(nodes == desired.nodes ? 0 : nodes);
      metrics_.SetDataParallel(job->status.job_id(), LayoutOf(job->status).data, desired.data);
      Launch(job, outcome.placement);
      return true;
  }
  return false;
}

void JobManager::Launch(Job* job, const Placement& placement) {
  const std::string& id = job->status.job_id();
  v1::JobStatus& status = job->status;
  status.set_generation(status.generation() + 1);
  job->grow_waits_for.clear();  // a later grow's wait is said again
  status.clear_assignments();
  for (const auto& a : placement.assignments) *status.add_assignments() = a;
  *status.mutable_groups() = placement.groups;
  status.set_reason("");
  // What the job carries into the new generation. The newest committed checkpoint, where it
  // should resume: as reported since this coordinator started, or as stored with the previous
  // generation's progress. What the previous generation trained, if it stepped (else its
  // predecessor's stands): a resume from an earlier step loses the difference (StepsLost).
  const int64_t checkpoint_at_launch =
      std::max(job->newest_checkpoint_step, status.progress().checkpoint_step());
  GenerationState::AtLaunch at_launch = job->gen.at_launch;
  if (status.generation_stepped()) {
    at_launch.trained = std::max(job->gen.furthest_step, status.progress().step());
  }
  at_launch.failures = job->checkpoint_failures;
  at_launch.last_failed = job->last_failed_checkpoint;
  at_launch.last_error = job->last_checkpoint_error;
  const int world = static_cast<int>(placement.assignments.size());
  // Everything else of the previous generation goes: its ranks, their reports, awaited ranks
  // (a new generation has nothing to reconcile), its link check, a hang being decided.
  job->gen = GenerationState::Launched(world, status.spec().watchdog().straggler_threshold());
  job->gen.checkpoint_at_launch = checkpoint_at_launch;
  job->gen.at_launch = std::move(at_launch);
  status.clear_progress();
  status.mutable_progress()->set_checkpoint_step(-1);
  status.clear_stopping_ranks();  // waited for long enough (Tick) or all gone
  status.set_stopping_deadline_unix_nanos(0);
  status.set_backoff_until_unix_nanos(0);
  status.set_generation_stepped(false);
  status.set_elastic_wait_until_unix_nanos(0);  // replaced, or shrunk
  job->recovery.OnLaunch(world, clock_->Now());
  absl::Status opened = rendezvous_->OpenGeneration(id, status.generation());
  if (!opened.ok()) RM_LOG(ERROR) << "rendezvous for " << id << ": " << opened;

  // Not another live job's port: two jobs whose rank 0 share a node would both listen on it
  // (the second's rank 0 fails with "Address already in use" and the job restarts).
  std::set<int> taken;
  for (const std::string& other : order_) {
    const Job* o = Find(other);
    const v1::JobState state = o->status.state();
    if (other != id && o->master_port > 0 &&
        (state == v1::JOB_STATE_RUNNING || state == v1::JOB_STATE_RESTARTING)) {
      taken.insert(o->master_port);
    }
  }
  job->master_port = MasterPort(options_.master_port_base, id, status.generation(), taken);
  const LaunchPlan plan =
      PlanLaunch(status, nodes_->HostAddress(placement.assignments[0].node()).value_or("127.0.0.1"),
                 job->master_port);
  // Stored before any agent hears of it: a coordinator that dies in between comes back knowing
  // the generation whose workers the agents may already run, and adopts them.
  Transition(job, v1::JOB_STATE_RUNNING, plan.Summary(status.generation()));
  for (const auto& [node, message] : plan.messages) {
    if (!agents_->Send(node, message)) {
      RM_LOG(WARNING) << "no stream to " << node << " for launching " << id;
    }
  }
}

}  // namespace ringmaster::coordinator
