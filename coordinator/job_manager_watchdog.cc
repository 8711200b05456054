// JobManager's watchdog, the part of the job manager fed by what a running generation's ranks
// report besides their exits: step summaries (progress, checkpoints, each rank's collective
// sequence numbers and compute time), from which it blames the rank(s) of a hang, flags
// stragglers and times a recovery's phases; the blamed ranks' exits quoted after a hang; link
// checks (requested, collected, judged, their slow or corrupting links named); and the job-level
// metric series these feed, started and removed with the job. The state machine, scheduling,
// restarts, nodes and recovery are in job_manager.cc; the per-job state both use is in
// job_manager_internal.h.
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/format_double.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "common/status.h"
#include "coordinator/hang_analysis.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/link_analysis.h"
#include "coordinator/recovery_tracker.h"
#include "coordinator/spec_validation.h"
#include "coordinator/straggler_detector.h"

namespace ringmaster::coordinator {
namespace {

// A worker process's side thread reports every 0.5 s and its agent forwards at most one summary
// per second: a rank not heard of for kSilentProcess is stopped or stuck; one heard of within
// kLiveProcess is alive.
constexpr absl::Duration kSilentProcess = absl::Milliseconds(2500);
constexpr absl::Duration kLiveProcess = absl::Milliseconds(2000);
// How long ringmaster_hang_suspect outlives the recovery: a recovery takes well under a scrape
// interval, and a series that is gone by the next scrape names nobody in Prometheus.
constexpr absl::Duration kHangSuspectLinger = absl::Minutes(5);

// A phase's name as events show it ("step"); a phase this coordinator does not know (from a newer
// agent) by its number.
std::string PhaseName(v1::WorkerPhase phase) {
  if (!v1::WorkerPhase_IsValid(phase)) return absl::StrCat("unknown (", phase, ")");
  return absl::AsciiStrToLower(absl::StripPrefix(v1::WorkerPhase_Name(phase), "WORKER_PHASE_"));
}

}  // namespace

using job_manager_internal::DescribeExit;
using job_manager_internal::LayoutOf;

absl::StatusOr<v1::CheckLinksResponse> JobManager::RequestLinkCheck(const std::string& job_id,
                                                                    const Caller& caller) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, FindForCaller(job_id, caller, "check its links"));
  if (job->status.state() != v1::JOB_STATE_RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", StateName(job->status.state()),
                     ": only a running job's links can be checked"));
  }
  if (job->status.spec().watchdog().link_check_disabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has watchdog.link_check: false"));
  }
  if (job->status.assignments_size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has one rank: it has no link to check"));
  }
  if (!job->status.generation_stepped()) {
    // Before its first step rank 0 may not run yet (its agent would drop the request), and the
    // generation's own start-up check is under way.
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " generation ", job->status.generation(),
                     " has not completed a step yet; ask again once it trains"));
  }
  // One rank is told; the ranks' per-step vote spreads it, so the request runs one check.
  v1::CoordinatorMessage message;
  v1::CheckLinks* check = message.mutable_check_links();
  check->mutable_job()->set_job_id(job_id);
  check->mutable_job()->set_generation(job->status.generation());
  check->set_rank(0);
  if (!agents_->Send(job->status.assignments(0).node(), message)) {
    return absl::UnavailableError(absl::StrCat("node ", job->status.assignments(0).node(),
                                               " (rank 0) is not connected; try again"));
  }
  const int64_t sequence =
      AddEvent(job, "link_check",
               absl::StrCat("link check requested",
                            caller.identity.empty() ? "" : " by " + caller.identity,
                            ": the ranks run it after an upcoming step"))
          .sequence();
  Persist(job);
  v1::CheckLinksResponse response;
  *response.mutable_job() = job->status;
  response.set_request_sequence(sequence);
  return response;
}

void JobManager::QuoteSuspectExit(Job* job, const std::string& node, const v1::WorkerState& state) {
  if (state.phase() != v1::WORKER_PHASE_EXITED ||
      state.job().generation() != job->hang_generation ||
      job->suspects_to_quote.erase(state.rank()) == 0) {
    return;
  }
  v1::JobEvent& event = AddEvent(job, "suspect_exit",
                                 absl::StrCat("blamed for the hang: ", DescribeExit(node, state)));
  event.set_generation(state.job().generation());
  event.add_ranks(state.rank());
  Persist(job);
}

void JobManager::OnStepSummary(const v1::StepSummary& summary) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(summary.job().job_id());
  if (job == nullptr || job->status.state() != v1::JOB_STATE_RUNNING ||
      summary.job().generation() != job->status.generation() || summary.rank() < 0 ||
      summary.rank() >= static_cast<int>(job->rank_step.size())) {
    return;
  }
  const v1::RankAssignment& a = job->status.assignments(summary.rank());
  // Phase and collective reports also make summaries; only a step report sets steps_in_summary
  // (and the agent starts every generation's summary empty).
  if (summary.steps_in_summary() > 0 && !job->status.generation_stepped()) {
    // Stored, once per generation: after a coordinator restart its failure must not count
    // towards the crash loop either.
    job->status.set_generation_stepped(true);
    job->status.set_failures_before_a_step(0);  // a crash loop, if any, is over
    Persist(job);
  }
  job->rank_step[summary.rank()] = summary.step();
  job->furthest_step = std::max(job->furthest_step, summary.step());
  // One rank per data-parallel replica counts its tokens (TP and PP ranks share them).
  if (a.tp_rank() == 0 && a.pp_rank() == 0) {
    job->rank_tokens_per_second[summary.rank()] = summary.tokens_per_second();
  }
  v1::JobProgress* progress = job->status.mutable_progress();
  progress->set_step(*std::min_element(job->rank_step.begin(), job->rank_step.end()));
  const int last_stage = LayoutOf(job->status).pipeline - 1;
  if (a.dp_rank() == 0 && a.tp_rank() == 0 && a.pp_rank() == last_stage) {
    progress->set_loss(summary.loss());
    progress->set_step_seconds(summary.step_seconds());
  }
  double tps = 0;
  for (double t : job->rank_tokens_per_second) tps += t;
  progress->set_tokens_per_second(tps);
  if (summary.checkpoint_step() > progress->checkpoint_step()) {
    progress->set_checkpoint_step(summary.checkpoint_step());
  }
  if (summary.checkpoint_step() > job->newest_checkpoint_step) {
    OnCheckpointCommitted(job, summary.checkpoint_step());
    job->newest_checkpoint_step = summary.checkpoint_step();
    job->last_checkpoint_time = clock_->Now();
    job->recovery.OnCheckpoint(summary.checkpoint_step());
    // Stored (its progress with it), so that a successor coordinator knows where the next
    // generation should resume (checkpoint_at_launch).
    Persist(job);
  }
  job->progress_dirty = true;
  Watch(job, summary);
}

void JobManager::Watch(Job* job, const v1::StepSummary& summary) {
  const int rank = summary.rank();
  const std::string& id = job->status.job_id();
  const v1::RankAssignment& a = job->status.assignments(rank);
  job->last_heard[rank] = clock_->Now();
  RankCollectives& numbers = job->collectives[rank];
  numbers.clear();
  for (const auto& [group, n] : summary.collective_entered()) numbers[group].first = n;
  for (const auto& [group, n] : summary.collective_completed()) numbers[group].second = n;

  // A one-rank job has nobody to single out: not judged.
  if (job->stragglers != nullptr && summary.steps_in_summary() > 0 &&
      job->status.assignments_size() > 1) {
    // A pipeline stage's ranks (its data- and tensor-parallel peers) run the same layers on
    // equal shares of the work; other stages run other layers.
    const int stage = a.pp_rank();
    const Layout layout = LayoutOf(job->status);
    if (auto change = job->stragglers->Add(rank, stage, layout.tensor * layout.data,
                                           summary.mean_compute_seconds())) {
      const double threshold = job->status.spec().watchdog().straggler_threshold();
      // A stage's only rank is judged by how much it slowed down, against the other stages.
      const std::string what =
          change->against_baseline
              ? absl::StrFormat(
                    "slowed down %.2fx more than the other pipeline stages (each "
                    "against its own earlier compute time; the only rank of stage %d)",
                    change->ratio, stage)
              : absl::StrFormat("computes %.2fx the median of the other ranks of pipeline stage %d",
                                change->ratio, stage);
      v1::JobEvent& event = AddEvent(
          job, "straggler",
          change->flagged
              ? absl::StrFormat("rank %d on %s %s (threshold %.2f) at step %d: straggler", rank,
                                a.node(), what, threshold, summary.step())
              : absl::StrFormat("rank %d on %s is back (%s) at step %d: no longer a straggler",
                                rank, a.node(), what, summary.step()));
      event.add_ranks(rank);
      Persist(job);
      if (stragglers_ != nullptr) {
        stragglers_->WithLabels({id, absl::StrCat(rank)})->Set(change->flagged ? 1 : 0);
        job->straggler_series.insert(rank);
      }
    }
  }

  if (summary.process_start_unix_nanos() > 0) {
    if (rank == 0 && !job->resumed) {
      // Before the recovery's event below, which says it (rank 0 may be the last to start).
      // Only the builtin trainer says where it resumed (see below).
      job->generation_start_step = summary.start_step();
      if (job->status.spec().trainer().has_builtin()) {
        job->steps_lost = StepsLost(*job, summary.start_step());
      }
    }
    WorkerStartup startup;
    startup.process_start = absl::FromUnixNanos(summary.process_start_unix_nanos());
    startup.rendezvous_seconds = summary.rendezvous_seconds();
    startup.restore_seconds = summary.restore_seconds();
    startup.first_step_seconds = summary.first_step_seconds();
    // The rank's link report came before its first step (the same agent stream, in order).
    auto checked = job->start_link_check_seconds.find(rank);
    if (checked != job->start_link_check_seconds.end()) {
      startup.link_check_seconds = checked->second;
    }
    if (std::optional<RecoveryPhases> phases = job->recovery.OnWorkerStarted(rank, startup)) {
      AddEvent(job, "recovered",
               absl::StrCat("every rank of generation ", job->status.generation(),
                            " completed a step; recovery took ", phases->ToString(),
                            job->steps_lost.empty() ? "" : "; ", job->steps_lost));
      Persist(job);
      if (recovery_seconds_ != nullptr) {
        const std::pair<const char*, double> values[] = {{"detect", phases->detect},
                                                         {"place", phases->place},
                                                         {"stop", phases->stop},
                                                         {"rendezvous", phases->rendezvous},
                                                         {"link_check", phases->link_check},
                                                         {"restore", phases->restore},
                                                         {"first_step", phases->first_step},
                                                         {"total", phases->total}};
        for (const auto& [phase, seconds] : values) {
          recovery_seconds_->WithLabels({id, phase})->Set(seconds);
        }
        job->recovery_series = true;
      }
      if (!job->hang_suspects.empty()) {
        job->hang_suspects_until = clock_->Now() + kHangSuspectLinger;
      }
    }
    if (rank == 0 && !job->resumed) {
      job->recovery.OnResume(summary.start_step());
      job->resumed = true;
      // Only the builtin trainer says where it resumed (a command job's program may report
      // checkpoints but leave start_step at 0).
      if (job->status.spec().trainer().has_builtin() &&
          summary.start_step() < job->checkpoint_at_launch) {
        NoteResumeBehind(job, summary);
      }
    }
  }
  if (rank == 0 && job->resumed && summary.step_end_unix_nanos() > 0) {
    job->recovery.OnStep(summary.step(), absl::FromUnixNanos(summary.step_end_unix_nanos()),
                         summary.first_step_seconds());
  }
}

std::vector<int> JobManager::HangEvidence(const Job& job, std::string* description) const {
  // First: a process that stopped reporting while its peers still report is the one they wait
  // for (stopped, or stuck so hard its side thread is too).
  const absl::Time now = clock_->Now();
  bool peers_alive = false;
  std::vector<int> silent;
  std::vector<std::string> lines;
  for (const auto& [r, heard] : job.last_heard) {
    if (now - heard > kSilentProcess) {
      silent.push_back(r);
      lines.push_back(absl::StrFormat(
          "rank %d's process stopped reporting %.1f s ago while its peers report (stopped or "
          "stuck)",
          r, absl::ToDoubleSeconds(now - heard)));
    } else if (now - heard < kLiveProcess) {
      peers_alive = true;
    }
  }
  if (peers_alive && !silent.empty()) {
    *description = absl::StrJoin(lines, "; ");
    return silent;
  }
  // Then: the ranks that never entered the collective their group waits in.
  std::vector<int> suspects;
  const std::vector<Laggard> laggards = FindLaggards(job.collectives);
  for (const Laggard& l : laggards) {
    if (std::find(suspects.begin(), suspects.end(), l.rank) == suspects.end()) {
      suspects.push_back(l.rank);
    }
  }
  *description = DescribeLaggards(laggards);
  return suspects;
}

void JobManager::DeclareHang(Job* job, const std::string& node, const v1::WorkerState& state,
                             absl::Time began) {
  job->pending_hang.reset();
  std::string why;
  std::vector<int> suspects = HangEvidence(*job, &why);
  if (suspects.empty()) suspects.push_back(state.rank());
  std::string what =
      absl::StrFormat("rank %d on %s made no progress for %.1f s in phase %s: hung", state.rank(),
                      node, state.last_report_age_seconds(), PhaseName(state.phase()));
  if (!why.empty()) absl::StrAppend(&what, "; ", why);
  v1::JobEvent& event = AddEvent(job, "hang", what);
  for (int r : suspects) event.add_ranks(r);
  job->hang_generation = job->status.generation();
  job->suspects_to_quote = std::set<int>(suspects.begin(), suspects.end());
  if (hangs_ != nullptr) hangs_->WithLabels({job->status.job_id()})->Increment();
  if (hang_suspects_ != nullptr) {
    ClearHangSuspects(job);
    for (int r : suspects) {
      hang_suspects_->WithLabels({job->status.job_id(), absl::StrCat(r)})->Set(1);
      job->hang_suspects.insert(r);
    }
  }
  Fail(job, what, /*fatal=*/false, began, job->status.assignments(suspects.front()).node());
}

void JobManager::ClearHangSuspects(Job* job) {
  for (int r : job->hang_suspects) {
    hang_suspects_->Remove({job->status.job_id(), absl::StrCat(r)});
  }
  job->hang_suspects.clear();
  job->hang_suspects_until = absl::InfiniteFuture();
}

void JobManager::NoteResumeBehind(Job* job, const v1::StepSummary& summary) {
  const int64_t lost = job->checkpoint_at_launch - summary.start_step();
  AddEvent(job, "resumed_behind",
           absl::StrCat("generation ", job->status.generation(), " ",
                        summary.start_step() > 0
                            ? absl::StrCat("resumed from step ", summary.start_step())
                            : std::string("started from step 0"),
                        ", but the job had committed a checkpoint at step ",
                        job->checkpoint_at_launch, ": ", lost,
                        " steps are trained again. Rank 0 could not use the newer checkpoints "
                        "(its log says why); a checkpoint.dir that not every node sees is a "
                        "common cause"));
  Persist(job);
  if (resumes_behind_ != nullptr) resumes_behind_->WithLabels({job->status.job_id()})->Increment();
}

void JobManager::StartSeries(Job* job) {
  if (restarts_ == nullptr) return;
  // Counters start at 0, so a rate or increase() sees a job's first restart or hang too.
  restarts_->WithLabels({job->status.job_id()});
  hangs_->WithLabels({job->status.job_id()});
  resumes_behind_->WithLabels({job->status.job_id()});
  if (!job->status.spec().checkpoint().dir().empty()) {
    checkpoint_failures_->WithLabels({job->status.job_id()});
  }
}

void JobManager::ForgetSeries(Job* job) {
  if (stragglers_ == nullptr) return;
  const std::string& id = job->status.job_id();
  restarts_->Remove({id});
  hangs_->Remove({id});
  resumes_behind_->Remove({id});
  checkpoint_failures_->Remove({id});
  steps_since_checkpoint_->Remove({id});
  checkpoint_interval_steps_->Remove({id});
  for (int r : job->straggler_series) stragglers_->Remove({id, absl::StrCat(r)});
  job->straggler_series.clear();
  ClearHangSuspects(job);
  if (job->recovery_series) {
    for (const char* phase : {"detect", "place", "stop", "rendezvous", "link_check", "restore",
                              "first_step", "total"}) {
      recovery_seconds_->Remove({id, phase});
    }
    job->recovery_series = false;
  }
  for (metrics::GaugeFamily* f :
       {goodput_, job_step_, job_tokens_per_second_, job_checkpoint_step_, job_checkpoint_time_}) {
    f->Remove({id});
  }
  ForgetLinkSeries(job);
}

void JobManager::ForgetLinkSeries(Job* job) {
  if (slow_links_ == nullptr) return;
  for (const auto& labels : job->slow_link_series) slow_links_->Remove(labels);
  for (const auto& labels : job->link_bandwidth_series) link_bandwidth_->Remove(labels);
  job->slow_link_series.clear();
  job->link_bandwidth_series.clear();
}

void JobManager::OnLinkReport(const v1::LinkReport& report) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(report.job().job_id());
  const int world = job == nullptr ? 0 : job->status.assignments_size();
  if (job == nullptr || job->status.state() != v1::JOB_STATE_RUNNING ||
      report.job().generation() != job->status.generation() || report.rank() < 0 ||
      report.rank() >= world) {
    return;
  }
  if (report.step() < 0) return;
  if (job->link_check != nullptr && report.step() < job->link_check->step()) {
    return;  // an earlier check's, superseded
  }
  if (job->link_check == nullptr || report.step() > job->link_check->step()) {
    v1::JobSpec spec = job->status.spec();
    ApplyDefaults(&spec);  // a job stored before slow_link_ratio existed gets its default
    job->link_check = std::make_unique<LinkCheckCollector>(
        job->status.generation(), report.step(), world, spec.watchdog().slow_link_ratio(),
        spec.watchdog().min_link_bytes_per_second());
  }
  if (report.step() == 0) job->start_link_check_seconds.emplace(report.rank(), report.seconds());
  std::vector<LinkSample> samples;
  for (const v1::LinkStat& l : report.links()) {
    if (l.peer_rank() < 0 || l.peer_rank() >= world || l.peer_rank() == report.rank()) continue;
    samples.push_back(
        {l.group(), report.rank(), l.peer_rank(), job->status.assignments(report.rank()).node(),
         job->status.assignments(l.peer_rank()).node(), l.bytes(), l.seconds(), l.wrong()});
  }
  if (!job->link_check->Add(report.rank(), samples)) return;
  // A rank that received wrong data exits right after its report and the generation ends before
  // the others report: corruption is named at once.
  const std::vector<v1::LinkState> corrupt = job->link_check->TakeNewCorruptions();
  for (const v1::LinkState& link : corrupt) AnnounceLink(job, link);
  if (!corrupt.empty()) Persist(job);
  if (job->link_check->complete()) JudgeLinks(job);
}

void JobManager::AnnounceLink(Job* job, const v1::LinkState& link) {
  const LinkCheckCollector& check = *job->link_check;
  std::string what = absl::StrFormat("%s: rank %d (%s) <-> rank %d (%s): %s each way", link.group(),
                                     link.rank(), link.node(), link.peer_rank(), link.peer_node(),
                                     FormatBandwidth(link.bytes_per_second()));
  if (link.baseline_bytes_per_second() > 0) {
    absl::StrAppend(
        &what, absl::StrFormat(", %.2fx the median of the other %s links %s (%s)",
                               link.bytes_per_second() / link.baseline_bytes_per_second(),
                               GroupKind(link.group()),
                               link.node() == link.peer_node() ? "inside a node" : "across nodes",
                               FormatBandwidth(link.baseline_bytes_per_second())));
  }
  if (link.wrong() > 0) {
    absl::StrAppend(&what, "; ", link.wrong(), link.wrong() == 1 ? " element" : " elements",
                    " arrived wrong: the link corrupts data");
  } else if (link.below_floor()) {
    absl::StrAppend(&what, ": slow (below the job's floor of ",
                    FormatBandwidth(check.min_bytes_per_second()), ")");
  } else {
    absl::StrAppend(&what, absl::StrFormat(": slow (threshold %.2fx)", check.slow_ratio()));
  }
  RM_LOG(WARNING) << "job " << job->status.job_id() << " generation " << job->status.generation()
                  << " link check: " << what;
  v1::JobEvent& event = AddEvent(job, "slow_link", what);
  event.add_ranks(link.rank());
  event.add_ranks(link.peer_rank());
  ExportSlowLink(job, link);
}

void JobManager::ExportSlowLink(Job* job, const v1::LinkState& link) {
  if (slow_links_ == nullptr) return;
  std::vector<std::string> labels = {
      job->status.job_id(),           link.group(), absl::StrCat(link.rank()),
      absl::StrCat(link.peer_rank()), link.node(),  link.peer_node()};
  slow_links_->WithLabels(labels)->Set(link.baseline_bytes_per_second() > 0
                                           ? link.bytes_per_second() /
                                                 link.baseline_bytes_per_second()
                                           : 0);
  job->slow_link_series.push_back(std::move(labels));
}

void JobManager::JudgeLinks(Job* job) {
  const v1::LinkCheckSummary summary = job->link_check->Summarize();
  // The verdict's series replace the previous check's (and this one's corruptions, named again).
  ForgetLinkSeries(job);
  bool announced = false;
  for (const v1::LinkState& link : summary.slow()) {
    if (link.wrong() > 0) {
      ExportSlowLink(job, link);  // its event came with the report; only the series again
      continue;
    }
    AnnounceLink(job, link);
    announced = true;
  }
  if (summary.step() > 0) {
    // Someone asked for this check (ringctl check-links): say how it went, fine or not.
    int links = 0;
    for (const v1::LinkClass& c : summary.classes()) links += c.links();
    v1::JobEvent& verdict =
        AddEvent(job, "link_check",
                 absl::StrCat("link check after step ", summary.step(), ": ", links, " links, ",
                              summary.slow_size() == 0
                                  ? "none slow or corrupting"
                                  : absl::StrCat(summary.slow_size(), " slow or corrupting")));
    verdict.set_step(summary.step());
    std::set<int> ends;
    for (const v1::LinkState& link : summary.slow()) ends.insert({link.rank(), link.peer_rank()});
    for (int rank : ends) verdict.add_ranks(rank);
    announced = true;
  }
  if (announced) Persist(job);
  if (link_bandwidth_ == nullptr) return;
  for (const v1::LinkClass& c : summary.classes()) {
    const char* scope = c.cross_node() ? "inter_node" : "intra_node";
    for (const auto& [stat, value] :
         {std::pair<const char*, double>{"median", c.median_bytes_per_second()},
          {"min", c.min_bytes_per_second()}}) {
      std::vector<std::string> labels = {job->status.job_id(), c.kind(), scope, stat};
      link_bandwidth_->WithLabels(labels)->Set(value);
      job->link_bandwidth_series.push_back(std::move(labels));
    }
  }
}

}  // namespace ringmaster::coordinator
