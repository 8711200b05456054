// JobManager's watchdog, the part of the job manager fed by what a running generation's ranks
// report besides their exits and link checks (job_manager_links.cc): step summaries (progress,
// checkpoints, each rank's collective sequence numbers and compute time), from which it blames
// the rank(s) of a hang, flags stragglers and times a recovery's phases; and the blamed ranks'
// exits quoted after a hang. The per-job state is in job_manager_internal.h and
// generation_state.h; the series it feeds are JobMetrics' (job_metrics.h).
#include <algorithm>
#include <deque>
#include <map>
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
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/format_double.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "common/one_line.h"
#include "common/status.h"
#include "coordinator/hang_analysis.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/median.h"
#include "coordinator/link_analysis.h"
#include "coordinator/recovery_tracker.h"
#include "coordinator/spec_validation.h"
#include "coordinator/straggler_detector.h"

namespace ringmaster::coordinator {
namespace {

// A rank heard of within kLiveProcess is alive (job_manager_internal.h's kSilentProcess: one not
// heard of for that long is stopped or stuck).
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
using job_manager_internal::InputCause;
using job_manager_internal::kInputCauseShare;
using job_manager_internal::kHangEvidenceWait;
using job_manager_internal::kMaxStackEventsPerHang;
using job_manager_internal::kSilentProcess;

bool job_manager_internal::WorksNow(const GenerationState& gen, int rank, absl::Time now) {
  auto heard = gen.last_heard.find(rank);
  return gen.working.count(rank) > 0 && heard != gen.last_heard.end() &&
         now - heard->second <= kSilentProcess;
}

std::set<int> job_manager_internal::UnknownRanks(const GenerationState& gen) {
  std::set<int> unknown = gen.unwatched;
  for (const auto& [node, ranks] : gen.awaiting) unknown.insert(ranks.begin(), ranks.end());
  return unknown;
}

std::vector<std::string> job_manager_internal::ActivitiesOf(const GenerationState& gen,
                                                            absl::Time now) {
  const int world = static_cast<int>(gen.rank_step.size());
  std::set<int> settled;
  bool waits = false;  // a settled rank is inside a collective: someone may hold it up
  for (const auto& [rank, since] : gen.numbers_since) {
    if (now - since < kSettledNumbers) continue;
    settled.insert(rank);
    auto numbers = gen.collectives.find(rank);
    if (numbers == gen.collectives.end()) continue;
    for (const auto& [group, n] : numbers->second) waits = waits || n.first > n.second;
  }
  std::map<int, Laggard> behind;  // each rank's first laggard entry (they come by rank)
  if (waits) {
    std::map<int, RankCollectives> held;
    std::set<int> unknown = UnknownRanks(gen);
    for (const auto& [rank, numbers] : gen.collectives) {
      if (settled.count(rank) > 0) {
        held.emplace(rank, numbers);
      } else {
        unknown.insert(rank);  // moving: neither behind nor missing from the rendezvous
      }
    }
    for (Laggard& l : FindLaggards(held, world, unknown)) behind.emplace(l.rank, std::move(l));
  }
  std::vector<std::string> activities;
  activities.reserve(world);
  for (int rank = 0; rank < world; ++rank) {
    RankView view;
    auto numbers = gen.collectives.find(rank);
    if (numbers != gen.collectives.end()) view.numbers = &numbers->second;
    auto phase = gen.phase.find(rank);
    if (phase != gen.phase.end()) view.phase = phase->second;
    view.working = job_manager_internal::WorksNow(gen, rank, now);
    view.unwatched = gen.unwatched.count(rank) > 0;
    view.finished = gen.finished_ranks.count(rank) > 0;
    view.settled = settled.count(rank) > 0;
    auto l = behind.find(rank);
    if (l != behind.end()) view.behind = &l->second;
    activities.push_back(RankActivity(view));
  }
  return activities;
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
      summary.rank() >= static_cast<int>(job->gen.rank_step.size())) {
    return;
  }
  const v1::RankAssignment& a = job->status.assignments(summary.rank());
  // Phase and collective reports also make summaries; only a step report sets steps_in_summary
  // (and the agent starts every generation's summary empty).
  // A shrunk elastic job may grow once its generation has stepped: its nodes may all be back
  // already, and no other event may come to run a pass (GrowElasticJobs).
  bool may_grow = false;
  if (summary.steps_in_summary() > 0 && !job->status.generation_stepped()) {
    // Stored, once per generation: after a coordinator restart its failure must not count
    // towards the crash loop either.
    job->status.set_generation_stepped(true);
    job->status.set_failures_before_a_step(0);  // a crash loop, if any, is over
    Persist(job);
    may_grow = job->status.elastic_nodes() != 0;
  }
  job->gen.rank_step[summary.rank()] = summary.step();
  job->gen.furthest_step = std::max(job->gen.furthest_step, summary.step());
  // One rank per data-parallel replica counts its tokens (TP and PP ranks share them).
  if (a.tp_rank() == 0 && a.pp_rank() == 0) {
    job->gen.rank_tokens_per_second[summary.rank()] = summary.tokens_per_second();
  }
  v1::JobProgress* progress = job->status.mutable_progress();
  progress->set_step(*std::min_element(job->gen.rank_step.begin(), job->gen.rank_step.end()));
  const int last_stage = LayoutOf(job->status).pipeline - 1;
  if (a.dp_rank() == 0 && a.tp_rank() == 0 && a.pp_rank() == last_stage) {
    progress->set_loss(summary.loss());
    progress->set_step_seconds(summary.step_seconds());
  }
  double tps = 0;
  for (double t : job->gen.rank_tokens_per_second) tps += t;
  progress->set_tokens_per_second(tps);
  if (summary.step() > 0) {
    v1::RankLiveState& figures = job->gen.rank_figures[summary.rank()];
    figures.set_step_seconds_p50(summary.step_seconds_p50());
    figures.set_step_seconds_p99(summary.step_seconds_p99());
    figures.set_compute_share(
        summary.step_seconds() > 0 ? summary.compute_seconds() / summary.step_seconds() : 0);
    figures.set_busbw_bytes_per_second(summary.busbw_bytes_per_second());
    figures.set_mfu(summary.mfu());
    double mfu_sum = 0;
    int mfu_ranks = 0;
    for (const auto& [rank, f] : job->gen.rank_figures) {
      if (f.mfu() > 0) mfu_sum += f.mfu(), ++mfu_ranks;
    }
    progress->set_mfu(mfu_ranks > 0 ? mfu_sum / mfu_ranks : 0);
  }
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
  if (may_grow) ScheduleLocked();
}

void JobManager::Watch(Job* job, const v1::StepSummary& summary) {
  const int rank = summary.rank();
  const std::string& id = job->status.job_id();
  const v1::RankAssignment& a = job->status.assignments(rank);
  if (summary.unwatched()) {
    // Its watch ended (docs/python.md): its silence from now says nothing, and its phase and
    // numbers are not known; judged again from its next report of a step or phase.
    job->gen.last_heard.erase(rank);
    job->gen.phase.erase(rank);
    job->gen.collectives.erase(rank);
    job->gen.numbers_since.erase(rank);
    job->gen.working.erase(rank);
    job->gen.stacks.erase(rank);
    job->gen.input_seconds.erase(rank);
    job->gen.unwatched.insert(rank);
    return;
  }
  job->gen.unwatched.erase(rank);
  // Set only when it changed (agent.proto); a late summary of a rank that exited says nothing.
  if (summary.has_stack() && job->gen.finished_ranks.count(rank) == 0) {
    // The agents' bound (common/one_line.h); a longer one is not shown at all.
    if (summary.stack().empty() || summary.stack().size() > kStackBytes) {
      job->gen.stacks.erase(rank);
    } else {
      job->gen.stacks[rank] = summary.stack();
    }
  }
  if (summary.working()) {
    job->gen.working.insert(rank);
  } else {
    job->gen.working.erase(rank);
  }
  job->gen.last_heard[rank] = clock_->Now();
  if (summary.phase() != v1::WORKER_PHASE_UNSPECIFIED) job->gen.phase[rank] = summary.phase();
  RankCollectives numbers;
  for (const auto& [group, n] : summary.collective_entered()) numbers[group].first = n;
  for (const auto& [group, n] : summary.collective_completed()) numbers[group].second = n;
  auto known = job->gen.collectives.find(rank);
  if (known == job->gen.collectives.end() || known->second != numbers ||
      job->gen.numbers_since.count(rank) == 0) {
    job->gen.numbers_since[rank] = clock_->Now();
    job->gen.collectives[rank] = std::move(numbers);
  }

  if (summary.steps_in_summary() > 0) {
    std::deque<double>& input = job->gen.input_seconds[rank];
    input.push_back(summary.mean_input_seconds());
    if (input.size() > GenerationState::kInputWindow) input.pop_front();
  }
  // A one-rank job has nobody to single out: not judged.
  if (job->gen.stragglers != nullptr && summary.steps_in_summary() > 0 &&
      job->status.assignments_size() > 1) {
    // A pipeline stage's ranks (its data- and tensor-parallel peers) run the same layers on
    // equal shares of the work; other stages run other layers.
    const int stage = a.pp_rank();
    const Layout layout = LayoutOf(job->status);
    // The step time the excess is weighed against: the mean of the same steps as the compute's
    // (an agent before mean_step_seconds: the last step's).
    const double step_seconds = summary.mean_step_seconds() > 0 ? summary.mean_step_seconds()
                                                                : summary.step_seconds();
    if (auto change = job->gen.stragglers->Add(rank, stage, layout.tensor * layout.data,
                                               summary.mean_compute_seconds(), step_seconds,
                                               summary.step())) {
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
              ? absl::StrFormat("rank %d on %s %s (threshold %.2f) at step %d: straggler%s", rank,
                                a.node(), what, threshold, summary.step(),
                                change->against_baseline
                                    ? ""
                                    : InputCause(job->status, job->gen, rank,
                                                 job->gen.stragglers->level(rank),
                                                 change->ratio))
              : absl::StrFormat("rank %d on %s is back (%s) at step %d: no longer a straggler",
                                rank, a.node(), what, summary.step()));
      event.add_ranks(rank);
      Persist(job);
      metrics_.SetStraggler(id, rank, change->flagged, &job->series);
    }
  }
  WatchLinks(job, summary);

  if (summary.process_start_unix_nanos() > 0) {
    if (rank == 0 && !job->gen.resumed) {
      // Before the recovery's event below, which says it (rank 0 may be the last to start).
      // Only the builtin trainer says where it resumed (see below).
      job->gen.start_step = summary.start_step();
      if (job->status.spec().trainer().has_builtin()) {
        job->gen.steps_lost = StepsLost(*job, summary.start_step());
      }
    }
    WorkerStartup startup;
    startup.process_start = absl::FromUnixNanos(summary.process_start_unix_nanos());
    startup.rendezvous_seconds = summary.rendezvous_seconds();
    startup.restore_seconds = summary.restore_seconds();
    startup.first_step_seconds = summary.first_step_seconds();
    // The rank's link report came before its first step (the same agent stream, in order).
    auto checked = job->gen.start_link_check_seconds.find(rank);
    if (checked != job->gen.start_link_check_seconds.end()) {
      startup.link_check_seconds = checked->second;
    }
    if (std::optional<RecoveryPhases> phases = job->recovery.OnWorkerStarted(rank, startup)) {
      AddEvent(job, "recovered",
               absl::StrCat("every rank of generation ", job->status.generation(),
                            " completed a step; recovery took ", phases->ToString(),
                            job->gen.steps_lost.empty() ? "" : "; ", job->gen.steps_lost));
      Persist(job);
      metrics_.SetRecovery(id, *phases, &job->series);
      if (!job->series.hang_suspects.empty()) {
        job->hang_suspects_until = clock_->Now() + kHangSuspectLinger;
      }
    }
    if (rank == 0 && !job->gen.resumed) {
      job->recovery.OnResume(summary.start_step());
      job->gen.resumed = true;
      // Only the builtin trainer says where it resumed (a command job's program may report
      // checkpoints but leave start_step at 0).
      if (job->status.spec().trainer().has_builtin() &&
          summary.start_step() < job->gen.checkpoint_at_launch) {
        NoteResumeBehind(job, summary);
      }
    }
  }
  if (rank == 0 && job->gen.resumed && summary.step_end_unix_nanos() > 0) {
    job->recovery.OnStep(summary.step(), absl::FromUnixNanos(summary.step_end_unix_nanos()),
                         summary.first_step_seconds());
  }
}

std::string job_manager_internal::InputCause(const v1::JobStatus& status,
                                             const GenerationState& gen, int rank,
                                             double compute_level, double ratio) {
  auto level = [](const std::deque<double>& samples) {
    return Median(std::vector<double>(samples.begin(), samples.end()));
  };
  auto mine = gen.input_seconds.find(rank);
  if (mine == gen.input_seconds.end() || ratio <= 1) return "";
  const double my_input = level(mine->second);
  if (my_input <= 0) return "";
  const int stage = status.assignments(rank).pp_rank();
  std::vector<double> peers;
  for (const auto& [r, samples] : gen.input_seconds) {
    if (r != rank && r < status.assignments_size() && status.assignments(r).pp_rank() == stage) {
      peers.push_back(level(samples));
    }
  }
  if (peers.empty()) return "";
  const double median = Median(peers);
  const double excess = compute_level * (1 - 1 / ratio);  // its compute beyond its peers'
  if (my_input - median < kInputCauseShare * excess) return "";
  auto ms = [](double seconds) { return absl::StrFormat("%.0f ms", seconds * 1000); };
  return absl::StrFormat(
      "; mostly waiting for input: %s per step for its next batch (DataLoader), its peers %s",
      ms(my_input), ms(median));
}

namespace {

// What a hang's evidence says of a generation (JobManager::HangEvidence): the ranks to blame,
// why, and the ranks it named that are writing a checkpoint (hang_analysis.h's checkpoint rule).
struct Evidence {
  std::vector<int> blamed;
  std::string description;
  std::vector<int> checkpoint_waits;
};

// The ranks of `gen` whose latest summary put them in CHECKPOINT or EVAL, or said they work
// outside any collective (heard within kSilentProcess of `now`: a frozen process works no more),
// but `judged` (-1: none): the ranks their peers may wait for without a hang (hang_analysis.h).
std::set<int> Checkpointing(const GenerationState& gen, int judged, absl::Time now) {
  std::set<int> ranks;
  for (const auto& [rank, phase] : gen.phase) {
    if ((phase == v1::WORKER_PHASE_CHECKPOINT || phase == v1::WORKER_PHASE_EVAL) &&
        rank != judged) {
      ranks.insert(rank);
    }
  }
  for (int rank : gen.working) {
    if (rank != judged && job_manager_internal::WorksNow(gen, rank, now)) ranks.insert(rank);
  }
  return ranks;
}

// Whether `rank`'s latest numbers say it waits in init_process_group's rendezvous.
// The numbers say the rank waits in init_process_group's rendezvous.
bool WaitsInRendezvous(const RankCollectives& numbers) {
  auto rendezvous = numbers.find(kRendezvousGroup);
  return rendezvous != numbers.end() && rendezvous->second.first > rendezvous->second.second;
}

bool InRendezvous(const GenerationState& gen, int rank) {
  auto numbers = gen.collectives.find(rank);
  return numbers != gen.collectives.end() && WaitsInRendezvous(numbers->second);
}

Evidence EvidenceOf(const GenerationState& gen, absl::Time now, int judged) {
  const std::set<int> checkpointing = Checkpointing(gen, judged, now);
  Evidence evidence;
  auto conclude = [&evidence](const std::vector<Suspect>& blamed) {
    std::vector<std::string> lines;
    for (const Suspect& s : blamed) {
      if (std::find(evidence.blamed.begin(), evidence.blamed.end(), s.rank) ==
          evidence.blamed.end()) {
        evidence.blamed.push_back(s.rank);
      }
      lines.push_back(s.why);
    }
    evidence.description = absl::StrJoin(lines, "; ");
  };
  // First: a process that stopped reporting while its peers still report is the one they wait
  // for (stopped, or stuck so hard its side thread is too). Not one that said it waits in
  // init_process_group's rendezvous: torch 1.13 waits there for the store's workers holding the
  // GIL, so its side thread is silent while its peers' are not.
  // Nor, while a peer waits there, one with no numbers yet: it has not reached
  // init_process_group (heard of by its watch's stack before it, _ticker.py; then silent: a
  // C extension holding the GIL), which the laggards below say.
  const bool rendezvous_waits =
      std::any_of(gen.collectives.begin(), gen.collectives.end(),
                  [](const auto& numbers) { return WaitsInRendezvous(numbers.second); });
  bool peers_alive = false;
  std::vector<Suspect> silent;
  for (const auto& [r, heard] : gen.last_heard) {
    if (now - heard > kSilentProcess) {
      if (InRendezvous(gen, r)) continue;
      auto numbers = gen.collectives.find(r);
      if (rendezvous_waits && (numbers == gen.collectives.end() || numbers->second.empty())) {
        continue;
      }
      silent.push_back({r, absl::StrFormat("rank %d's process stopped reporting %.1f s ago while "
                                           "its peers report (stopped or stuck)",
                                           r, absl::ToDoubleSeconds(now - heard))});
    } else if (now - heard < kLiveProcess) {
      peers_alive = true;
    }
  }
  if (peers_alive && !silent.empty()) {
    std::vector<Suspect> blamed =
        OutsideCheckpoints(silent, checkpointing, &evidence.checkpoint_waits);
    if (!blamed.empty()) {
      conclude(blamed);
      return evidence;
    }
  }
  // Then: the ranks that never entered the collective their group waits in.
  std::vector<Suspect> laggards;
  for (const Laggard& l : FindLaggards(gen.collectives, static_cast<int>(gen.rank_step.size()),
                                      job_manager_internal::UnknownRanks(gen))) {
    laggards.push_back({l.rank, DescribeLaggards({l})});
  }
  conclude(OutsideCheckpoints(laggards, checkpointing, &evidence.checkpoint_waits));
  return evidence;
}

}  // namespace

std::vector<int> JobManager::HangEvidence(const Job& job, std::string* description) const {
  Evidence evidence = EvidenceOf(job.gen, clock_->Now(), /*judged=*/-1);
  *description = std::move(evidence.description);
  return evidence.blamed;
}

bool JobManager::JudgeHangReport(Job* job, const std::string& node, const v1::WorkerState& state) {
  const int rank = state.rank();
  if (job->gen.pending_hangs.count(rank) > 0) return false;  // being decided
  job->gen.set_aside_hangs.erase(rank);                      // this report replaces it
  const absl::Time now = clock_->Now();
  const absl::Time began = now - absl::Seconds(state.last_report_age_seconds());
  const absl::Time decide_by = std::max(began, job->gen.heard_from) + kHangEvidenceWait;
  std::string why;
  if (HangEvidence(*job, &why).empty() && now < decide_by) {
    job->gen.pending_hangs[rank] = GenerationState::PendingHang{node, state, began, decide_by};
    return false;  // Tick() decides once the evidence is in, or the wait is over.
  }
  DeclareHang(job, node, state, began);
  return job->status.state() != v1::JOB_STATE_RUNNING;
}

bool JobManager::RejudgeSetAsideHangs(Job* job, absl::Time now) {
  GenerationState& gen = job->gen;
  const std::set<int> checkpointing_now = Checkpointing(gen, /*judged=*/-1, now);
  std::vector<int> again;
  for (auto it = gen.set_aside_hangs.begin(); it != gen.set_aside_hangs.end();) {
    const int rank = it->first;
    GenerationState::SetAsideHang& aside = it->second;
    auto phase = gen.phase.find(rank);
    const bool phase_changed = phase != gen.phase.end() && phase->second != aside.phase;
    // Its numbers moved: its wait is over (its agent takes that for progress, and reports it
    // again if it stalls again).
    const bool wait_moved = gen.collectives[rank] != aside.collectives;
    if (gen.rank_step[rank] > aside.step || phase_changed || wait_moved) {
      it = gen.set_aside_hangs.erase(it);  // it reported again: its agent watches it afresh
      continue;
    }
    const bool checkpointing =
        std::any_of(aside.waits_for.begin(), aside.waits_for.end(),
                    [&checkpointing_now](int r) { return checkpointing_now.count(r) > 0; });
    if (checkpointing) {
      aside.checkpoints_over = absl::InfiniteFuture();
    } else if (aside.checkpoints_over == absl::InfiniteFuture()) {
      aside.checkpoints_over = now;
    } else if (now - aside.checkpoints_over >=
               absl::Seconds(aside.report.state.last_report_age_seconds())) {
      again.push_back(rank);  // silent as long again as when its agent reported it
    }
    ++it;
  }
  for (int rank : again) {
    if (job->status.state() != v1::JOB_STATE_RUNNING) break;
    GenerationState::PendingHang report = gen.set_aside_hangs[rank].report;
    gen.set_aside_hangs.erase(rank);
    report.state.set_last_report_age_seconds(absl::ToDoubleSeconds(now - report.began));
    RM_LOG(INFO) << absl::StrFormat(
        "job %s: rank %d on %s, set aside while peers wrote a checkpoint, evaluated or worked, "
        "is still silent: judged again",
        job->status.job_id(), rank, report.node);
    JudgeHangReport(job, report.node, report.state);
  }
  return job->status.state() != v1::JOB_STATE_RUNNING;
}

void JobManager::DeclareHang(Job* job, const std::string& node, const v1::WorkerState& state,
                             absl::Time began) {
  job->gen.pending_hangs.erase(state.rank());
  Evidence evidence = EvidenceOf(job->gen, clock_->Now(), state.rank());
  if (evidence.blamed.empty() && !evidence.checkpoint_waits.empty()) {
    // The checkpoint rule (hang_analysis.h): the rank waits for peers that write a checkpoint,
    // whose own agents report them if it outlasts their checkpoint allowance. Kept, to be judged
    // again if the rank stays silent after the checkpoints (RejudgeSetAsideHangs).
    GenerationState::SetAsideHang& aside = job->gen.set_aside_hangs[state.rank()];
    aside = GenerationState::SetAsideHang{};
    aside.report = GenerationState::PendingHang{node, state, began, began};
    aside.step = job->gen.rank_step[state.rank()];
    auto phase = job->gen.phase.find(state.rank());
    if (phase != job->gen.phase.end()) aside.phase = phase->second;
    aside.collectives = job->gen.collectives[state.rank()];
    aside.waits_for = evidence.checkpoint_waits;
    RM_LOG(INFO) << absl::StrFormat(
        "job %s: rank %d on %s, silent for %.1f s in phase %s, waits for rank(s) %s writing a "
        "checkpoint, evaluating or working outside any collective: not a hang",
        job->status.job_id(), state.rank(), node, state.last_report_age_seconds(),
        PhaseName(state.phase()), absl::StrJoin(evidence.checkpoint_waits, ", "));
    return;
  }
  const std::string why = evidence.description;
  std::vector<int> suspects = evidence.blamed;
  if (suspects.empty()) suspects.push_back(state.rank());
  std::string what =
      state.blocked_in_collective()
          ? absl::StrFormat(
                "rank %d on %s waited %.1f s, before its first step, in a collective that did not "
                "move: hung",
                state.rank(), node, state.last_report_age_seconds())
          : absl::StrFormat("rank %d on %s made no progress for %.1f s in phase %s: hung",
                            state.rank(), node, state.last_report_age_seconds(),
                            PhaseName(state.phase()));
  if (!why.empty()) absl::StrAppend(&what, "; ", why);
  v1::JobEvent& event = AddEvent(job, "hang", what);
  for (int r : suspects) event.add_ranks(r);
  int stacks_quoted = 0;
  for (int r : suspects) {
    auto stack = job->gen.stacks.find(r);
    if (stack == job->gen.stacks.end()) continue;
    if (++stacks_quoted > kMaxStackEventsPerHang) break;  // GetJob had them all
    v1::JobEvent& where = AddEvent(
        job, "stack",
        absl::StrCat("rank ", r, " on ", job->status.assignments(r).node(),
                     ", where its Python training thread stalled (innermost last): ",
                     absl::StrReplaceAll(stack->second, {{"\n", " > "}})));
    where.add_ranks(r);
  }
  job->hang_generation = job->status.generation();
  job->suspects_to_quote = std::set<int>(suspects.begin(), suspects.end());
  metrics_.CountHang(job->status.job_id());
  if (metrics_.enabled()) {
    ClearHangSuspects(job);
    metrics_.SetHangSuspects(job->status.job_id(), suspects, &job->series);
  }
  Fail(job, what, /*fatal=*/false, began, job->status.assignments(suspects.front()).node());
}

void JobManager::ClearHangSuspects(Job* job) {
  metrics_.ClearHangSuspects(job->status.job_id(), &job->series);
  job->hang_suspects_until = absl::InfiniteFuture();
}

void JobManager::NoteResumeBehind(Job* job, const v1::StepSummary& summary) {
  const int64_t lost = job->gen.checkpoint_at_launch - summary.start_step();
  AddEvent(job, "resumed_behind",
           absl::StrCat("generation ", job->status.generation(), " ",
                        summary.start_step() > 0
                            ? absl::StrCat("resumed from step ", summary.start_step())
                            : std::string("started from step 0"),
                        ", but the job had committed a checkpoint at step ",
                        job->gen.checkpoint_at_launch, ": ", lost,
                        " steps are trained again. Rank 0 could not use the newer checkpoints "
                        "(its log says why); a checkpoint.dir that not every node sees is a "
                        "common cause"));
  Persist(job);
  metrics_.CountResumeBehind(job->status.job_id());
}

}  // namespace ringmaster::coordinator
