// JobManager's handling of nodes: cordons and drains (UpdateNode), a node lost or leaving, and a
// node's (re)registration, reconciled with the jobs' current generations. A drained job's ranks
// are asked to checkpoint and exit; their devices stay held until they have (stopping ranks).
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint_grace.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/node_update.h"

namespace ringmaster::coordinator {
namespace {

bool IsStopping(const v1::JobStatus& status, int rank) {
  return std::find(status.stopping_ranks().begin(), status.stopping_ranks().end(), rank) !=
         status.stopping_ranks().end();
}

// Removes `rank` from the status's stopping ranks; false if it was not one.
bool EraseStoppingRank(v1::JobStatus* status, int rank) {
  auto* ranks = status->mutable_stopping_ranks();
  auto it = std::find(ranks->begin(), ranks->end(), rank);
  if (it == ranks->end()) return false;
  ranks->erase(it);
  return true;
}

// Names in `event` the job's ranks on `node`.
void AddRanksOn(const v1::JobStatus& status, const std::string& node, v1::JobEvent* event) {
  for (const auto& a : status.assignments()) {
    if (a.node() == node) event->add_ranks(a.rank());
  }
}

}  // namespace

using job_manager_internal::RankIsOn;
using job_manager_internal::RunsOn;

absl::StatusOr<v1::UpdateNodeResponse> JobManager::UpdateNode(const v1::UpdateNodeRequest& request,
                                                              const Caller& caller) {
  RETURN_IF_ERROR(ValidateNodeUpdate(request, caller));
  const std::string& node = request.node();
  absl::MutexLock lock(&mu_);
  // A node is known once registered or cordoned, or while a running job has ranks there (after a
  // coordinator restart, before the node is back).
  const auto runs_there = [&](const std::string& id) { return RunsOn(Find(id)->status, node); };
  const bool has_jobs = std::any_of(order_.begin(), order_.end(), runs_there);
  if (!has_jobs) RETURN_IF_ERROR(nodes_->Status(node).status());
  std::optional<v1::NodeCordon> cordon;
  if (request.action() != v1::NODE_ACTION_UNCORDON) {
    cordon = CordonFor(request, caller, clock_->Now(), nodes_->CordonOf(node));
  }
  RETURN_IF_ERROR(store_->PutCordon(node, cordon));
  nodes_->SetCordon(node, cordon);
  RM_LOG(INFO) << "node " << node << ": " << NodeActionName(request.action())
               << (caller.identity.empty() ? "" : " by " + caller.identity)
               << (request.reason().empty() ? "" : ": " + request.reason());
  v1::UpdateNodeResponse response;
  if (request.action() == v1::NODE_ACTION_DRAIN) {
    const std::string why = absl::StrCat("node ", node, " drained",
                                         caller.identity.empty() ? "" : " by " + caller.identity,
                                         request.reason().empty() ? "" : ": " + request.reason());
    for (const std::string& id : order_) {
      if (!runs_there(id)) continue;
      MoveOffNode(Find(id), node, why, options_.drain_checkpoint_grace_seconds);
      response.add_moved_jobs(id);
    }
  }
  ScheduleLocked();
  absl::StatusOr<v1::NodeStatus> now = nodes_->Status(node);
  if (now.ok()) {
    *response.mutable_node() = *std::move(now);
  } else {
    response.mutable_node()->set_name(node);  // uncordoned, and not registered at the moment
  }
  return response;
}

void JobManager::MoveOffNode(Job* job, const std::string& node, const std::string& why,
                             double grace) {
  AddRanksOn(job->status, node, &AddEvent(job, "drain", why));
  // Only running ranks whose agent is connected can be asked, and only they will report an exit.
  std::set<int> stopping;
  if (grace > 0) {
    for (const auto& a : job->status.assignments()) {
      if (nodes_->IsAlive(a.node()) && !job->gen.finished_ranks.count(a.rank())) {
        stopping.insert(a.rank());
      }
    }
  }
  const absl::Time now = clock_->Now();
  absl::Time not_before = absl::InfinitePast();
  std::string reason = why;
  std::string from = "the last checkpoint";
  if (!stopping.empty()) {
    // By then every worker has been SIGKILLed at the latest.
    const absl::Duration most =
        absl::Seconds(grace + options_.stop_grace_seconds) + absl::Seconds(5);
    not_before = now + most;
    absl::StrAppend(&reason, "; waiting up to ", absl::FormatDuration(most), " for ",
                    stopping.size(), " rank(s) of generation ", job->status.generation(),
                    " to checkpoint and exit");
    from = "the checkpoint its ranks write now";
  }
  // Stored with the RESTARTING transition, so that a coordinator restart goes on waiting.
  for (int rank : stopping) job->status.add_stopping_ranks(rank);
  job->status.set_stopping_deadline_unix_nanos(stopping.empty() ? 0
                                                                : absl::ToUnixNanos(not_before));
  Relaunch(job, why, now, not_before, reason,
           absl::StrCat(why, "; restarting elsewhere from ", from,
                        " (not counted against restart.max_restarts)"),
           stopping.empty() ? 0 : grace);
  // The devices of the ranks still checkpointing stay held until each exits: nothing else is
  // placed on a GPU a worker still uses.
  for (int rank : stopping) HoldStoppingDevice(job, rank);
}

void JobManager::HoldStoppingDevice(Job* job, int rank) {
  const v1::RankAssignment& a = job->status.assignments(rank);
  if (absl::Status held = nodes_->Adopt(job->status.job_id(), a.node(), a.local_device());
      !held.ok()) {
    RM_LOG(WARNING) << "job " << job->status.job_id() << " rank " << rank << ": " << held;
  }
}

void JobManager::OnStoppingRankGone(Job* job, int rank) {
  if (!EraseStoppingRank(&job->status, rank)) return;
  const v1::RankAssignment& a = job->status.assignments(rank);
  nodes_->Release(job->status.job_id(), a.node(), a.local_device());
  // Not stored per exit (a drain of a large job would write once per rank under the lock): after
  // a coordinator restart a rank still listed that has exited counts as gone when its node
  // registers without it.
  if (!job->status.stopping_ranks().empty()) return;
  job->status.set_stopping_deadline_unix_nanos(0);
  const bool ended = IsTerminal(job->status.state());  // cancelled during the wait, say
  AddEvent(job, "stopped",
           absl::StrCat("every rank of generation ", job->status.generation(),
                        " asked to checkpoint has exited", ended ? "" : ": launching"));
  if (ended) {
    Persist(job);
    return;
  }
  job->launch_not_before = absl::InfinitePast();
  const int world = job->status.assignments_size();
  if (static_cast<int>(job->gen.finished_ranks.size()) == world) {
    Finish(job, v1::JOB_STATE_SUCCEEDED, absl::StrCat("all ", world, " ranks finished"));
  } else {
    Persist(job);
  }
}

void JobManager::OnNodeLost(const std::string& node) {
  absl::MutexLock lock(&mu_);
  // A node lost when its stream ended is handed on by the coordinator's ticker, so its agent may
  // have registered again first (under this lock): that registration reconciled the node's ranks
  // with what the agent runs, which is the news now.
  if (nodes_->IsAlive(node)) {
    RM_LOG(INFO) << "node " << node
                 << " registered again before its loss was handled: its ranks were reconciled";
    return;
  }
  bool changed = false;
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (!job->status.stopping_ranks().empty()) {  // RESTARTING, or ended during a drain's wait
      for (const auto& a : job->status.assignments()) {
        if (a.node() == node) OnStoppingRankGone(job, a.rank());
      }
      changed = true;
      continue;
    }
    if (!RunsOn(job->status, node)) {
      // A lost spare: the pass lets it go and takes another free node at once.
      const auto& spares = job->status.spare_nodes();
      changed |= std::find(spares.begin(), spares.end(), node) != spares.end();
      continue;
    }
    std::string what = absl::StrCat("node ", node, " was lost");
    AddRanksOn(job->status, node, &AddEvent(job, "node_lost", what));
    // The node manager measures silences on its own clock (the steady one, in the coordinator).
    const absl::Time heard = clock_->Now() - nodes_->SilentFor(node).value_or(absl::ZeroDuration());
    Fail(job, what, /*fatal=*/false, heard, node);
    changed = true;
  }
  if (changed) ScheduleLocked();
}

void JobManager::OnNodeLeaving(const std::string& node, const v1::Leaving& leaving) {
  absl::MutexLock lock(&mu_);
  LeavingLocked(node, leaving);
}

void JobManager::LeavingLocked(const std::string& node, const v1::Leaving& leaving) {
  const double grace = absl::ToDoubleSeconds(CheckpointGrace(leaving.checkpoint_grace_seconds()));
  const std::string why =
      absl::StrCat("node ", node, " is shutting down",
                   leaving.reason().empty() ? "" : " (" + leaving.reason() + ")");
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (RunsOn(job->status, node)) MoveOffNode(job, node, why, grace);
  }
  ScheduleLocked();
}

absl::StatusOr<uint64_t> JobManager::RegisterNode(
    const v1::Register& registration, const std::function<void(uint64_t session)>& registered) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const uint64_t session, nodes_->Register(registration));
  if (registered) registered(session);
  ReconcileNodeLocked(registration);
  // Leaving since an earlier stream (the node manager took it from the registration, before any
  // placement): its running jobs move, as when the Leaving message came.
  if (registration.has_leaving()) LeavingLocked(registration.node(), registration.leaving());
  return session;
}

void JobManager::ReconcileNodeLocked(const v1::Register& registration) {
  const std::string& node = registration.node();
  // (job, rank) of the jobs' current generations that run here or whose exit the node reported.
  std::set<std::pair<std::string, int>> accounted;
  auto account = [&](Job* job, int rank) {
    accounted.insert({job->status.job_id(), rank});
    auto awaited = job->gen.awaiting.find(node);
    if (awaited == job->gen.awaiting.end()) return;
    awaited->second.erase(rank);
    if (awaited->second.empty()) job->gen.awaiting.erase(awaited);
  };
  for (const v1::WorkerState& worker : registration.running_workers()) {
    Job* job = Find(worker.job().job_id());
    const bool current = job != nullptr && worker.job().generation() == job->status.generation() &&
                         RankIsOn(job->status, worker.rank(), node);
    if (current) account(job, worker.rank());
    if (current && job->status.state() == v1::JOB_STATE_RUNNING) {
      // Heard of through its agent: from now on its silence counts (hang evidence).
      job->gen.last_heard.emplace(worker.rank(), clock_->Now());
      job->gen.heard_from = clock_->Now();
    }
    if (current && IsStopping(job->status, worker.rank())) {
      // Asked to checkpoint and exit before the coordinator restarted: its agent is still
      // stopping it, and its device stays held until it exits.
      HoldStoppingDevice(job, worker.rank());
      continue;
    }
    bool adopt = current && job->status.state() == v1::JOB_STATE_RUNNING;
    if (adopt) {
      const v1::RankAssignment& a = job->status.assignments(worker.rank());
      adopt = nodes_->Adopt(job->status.job_id(), node, a.local_device()).ok();
    }
    if (adopt) continue;
    v1::CoordinatorMessage message;
    v1::StopWorkers* stop = message.mutable_stop();
    *stop->mutable_job() = worker.job();
    stop->set_grace_seconds(options_.stop_grace_seconds);
    stop->set_reason("not part of the job's current generation");
    agents_->Send(node, message);
  }
  // The exits the agent reported, again: those of current generations that this coordinator had
  // been told of before it restarted (its finished ranks live in memory) are handled as if they
  // came now; handling one twice changes nothing.
  for (const v1::WorkerState& exit : registration.exited_workers()) {
    Job* job = Find(exit.job().job_id());
    if (job == nullptr || exit.phase() != v1::WORKER_PHASE_EXITED ||
        exit.job().generation() != job->status.generation() ||
        !RankIsOn(job->status, exit.rank(), node)) {
      continue;
    }
    account(job, exit.rank());
    OnWorkerStateLocked(node, exit);
  }
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (job->status.state() != v1::JOB_STATE_RUNNING) continue;
    // A running job's rank placed here that the node lists neither as running (or starting) nor
    // as exited, and that had not finished, is gone: the agent restarted (its workers died with
    // it) or never got the launch. Waiting would wait for ever on a job all of whose ranks are
    // here; elsewhere, for its peers' collectives to time out.
    std::vector<int> gone;
    for (const v1::RankAssignment& a : job->status.assignments()) {
      if (a.node() == node && !accounted.count({id, a.rank()}) &&
          !job->gen.finished_ranks.count(a.rank())) {
        gone.push_back(a.rank());
      }
    }
    if (gone.empty()) continue;
    job->gen.awaiting.erase(node);
    Fail(job,
         absl::StrCat("node ", node, " registered without rank(s) ", absl::StrJoin(gone, ", "),
                      " of generation ", job->status.generation(),
                      " (its agent restarted, or the launch never reached it)"),
         /*fatal=*/false, clock_->Now(), node);
  }
  for (const std::string& id : order_) {
    Job* job = Find(id);
    // Ranks still awaited after a drain that were placed here but neither run here nor reported
    // an exit have gone (their agent restarted, say).
    const std::vector<int> stopping(job->status.stopping_ranks().begin(),
                                    job->status.stopping_ranks().end());
    for (int rank : stopping) {
      if (job->status.assignments(rank).node() == node && !accounted.count({id, rank})) {
        OnStoppingRankGone(job, rank);
      }
    }
  }
  ScheduleLocked();
}

}  // namespace ringmaster::coordinator
