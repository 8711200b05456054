#include "agent/local_watchdog.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "agent/working_rank.h"

namespace ringmaster::agent {
namespace {

// Nearest-rank p99: the smallest sample with at least 99% of the samples at or below it, i.e. the
// ceil(0.99 n)-th smallest (integer arithmetic, so n = 100 gives the 99th exactly).
double P99(const std::deque<double>& samples) {
  std::vector<double> sorted(samples.begin(), samples.end());
  const size_t rank = (99 * sorted.size() + 99) / 100;  // 1-based; >= 1 for a non-empty window.
  std::nth_element(sorted.begin(), sorted.begin() + (rank - 1), sorted.end());
  return sorted[rank - 1];
}

// `seconds` as an allowance; zero (the agent's) for one that is not positive and finite.
absl::Duration PositiveSeconds(double seconds) {
  return std::isfinite(seconds) && seconds > 0 ? absl::Seconds(seconds) : absl::ZeroDuration();
}

// Per group, (entered, completed) of a collectives report.
std::map<std::string, std::pair<int64_t, int64_t>> SequencesOf(
    const v1::ReportCollectivesRequest& report) {
  std::map<std::string, std::pair<int64_t, int64_t>> sequences;
  for (const auto& [group, seq] : report.collective_entered()) sequences[group].first = seq;
  for (const auto& [group, seq] : report.collective_completed()) sequences[group].second = seq;
  return sequences;
}

// A side thread that reports every second and said nothing for this long is not taken at its
// word any more (the process is frozen, or its GIL held by a long call).
constexpr absl::Duration kSideThreadSilence = absl::Seconds(5);

}  // namespace

JobAllowances AllowancesOf(const v1::WatchdogSpec& watchdog) {
  JobAllowances a;
  a.step = PositiveSeconds(watchdog.hang_timeout_seconds());
  a.init = PositiveSeconds(watchdog.init_timeout_seconds());
  a.checkpoint = PositiveSeconds(watchdog.checkpoint_timeout_seconds());
  return a;
}

LocalWatchdog::LocalWatchdog(Clock* clock, WatchdogOptions options)
    : clock_(clock), options_(std::move(options)) {}

void LocalWatchdog::Track(const std::string& job_id, int64_t generation, int rank,
                          JobAllowances allowances, WatchFrom watch_from) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[Key(job_id, rank)];
  w.allowances = allowances;
  w.watch_from = watch_from;
  StartGeneration(&w, generation, now);
}

void LocalWatchdog::StartGeneration(Worker* worker, int64_t generation, absl::Time now) {
  Worker fresh;
  fresh.generation = generation;
  fresh.last_report = now;
  fresh.allowances = worker->allowances;
  fresh.watch_from = worker->watch_from;
  fresh.watched = worker->watch_from == WatchFrom::kLaunch;
  *worker = std::move(fresh);
}

void LocalWatchdog::Report(const std::string& job_id, int64_t generation, int rank,
                           v1::WorkerPhase phase, double step_seconds) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(Key(job_id, rank));
  // An untracked rank's report raced with its exit: tracking it again would declare a dead worker
  // hung. An older generation's report is stale.
  if (it == workers_.end() || generation < it->second.generation) return;
  Worker& w = it->second;
  if (generation > w.generation) StartGeneration(&w, generation, now);
  w.last_report = now;
  w.hang_reported = false;
  w.watched = true;
  w.ended = false;
  w.in_collective = false;
  if (phase != v1::WORKER_PHASE_UNSPECIFIED) w.phase = phase;
  if (step_seconds > 0) {
    w.step_seconds.push_back(step_seconds);
    while (static_cast<int>(w.step_seconds.size()) > std::max(1, options_.step_window)) {
      w.step_seconds.pop_front();
    }
  }
}

void LocalWatchdog::Collectives(const v1::ReportCollectivesRequest& report) {
  if (StackOnly(report)) return;  // Neither progress nor a wait (working_rank.h).
  const absl::Time now = clock_->Now();
  const int64_t generation = report.worker().generation();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(Key(report.worker().job_id(), report.worker().rank()));
  if (it == workers_.end() || generation < it->second.generation) return;
  Worker& w = it->second;
  if (generation > w.generation) StartGeneration(&w, generation, now);
  if (report.watch_ended()) {  // Unwatched until a program reports again (the class comment).
    w.watched = false;
    w.in_collective = false;
    w.tells_blocked = false;
    w.hang_reported = false;
    w.ended = true;
    return;
  }
  if (w.ended) return;  // a report the ended watch's side thread had in flight
  w.program_timeout = PositiveSeconds(report.timeout_seconds());
  auto sequences = SequencesOf(report);
  if (w.watched) {  // Its silence is judged (the class comment), with what the report says.
    if (!report.blocked_known()) return;
    w.tells_blocked = true;
    w.collectives_heard = now;
    w.blocked_now = WaitsOnPeers(report);
    if (sequences != w.sequences) {
      w.sequences = std::move(sequences);
      w.last_report = now;  // moved: progress
      w.hang_reported = false;
    }
    if (Busy(w, now)) w.busy_heard = now;
    return;
  }
  if (!report.blocked()) {
    w.in_collective = false;
  } else if (!w.in_collective || sequences != w.sequences) {
    w.in_collective = true;
    w.stalled_since = now;
    w.sequences = std::move(sequences);
    w.hang_reported = false;
  }
}

void LocalWatchdog::Untrack(const std::string& job_id, int64_t generation, int rank) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(Key(job_id, rank));
  if (it != workers_.end() && it->second.generation <= generation) workers_.erase(it);
}

absl::Duration LocalWatchdog::InitAllowance(const Worker& worker) const {
  return worker.allowances.init > absl::ZeroDuration() ? worker.allowances.init
                                                       : options_.init_timeout;
}

absl::Duration LocalWatchdog::WaitAllowance(const Worker& worker) const {
  if (worker.allowances.init > absl::ZeroDuration()) return worker.allowances.init;
  if (worker.program_timeout <= absl::ZeroDuration()) return options_.init_timeout;
  // Just before torch gives up by itself (its clock started when the rank entered the
  // collective, up to a report interval before this one heard of it).
  const absl::Duration margin = std::min(
      std::max(absl::Seconds(30), worker.program_timeout / 20), worker.program_timeout / 2);
  return worker.program_timeout - margin;
}

absl::Duration LocalWatchdog::CheckpointAllowance(const Worker& worker) const {
  return worker.allowances.checkpoint > absl::ZeroDuration() ? worker.allowances.checkpoint
                                                             : options_.checkpoint_timeout;
}

bool LocalWatchdog::Busy(const Worker& worker, absl::Time now) {
  return worker.watched && worker.tells_blocked && !worker.blocked_now &&
         !worker.step_seconds.empty() && now - worker.collectives_heard <= kSideThreadSilence &&
         (worker.phase == v1::WORKER_PHASE_STEP || worker.phase == v1::WORKER_PHASE_EVAL);
}

absl::Duration LocalWatchdog::AllowanceOf(const Worker& worker, absl::Time now) const {
  if (!worker.watched) {
    return worker.in_collective ? WaitAllowance(worker) : absl::InfiniteDuration();
  }
  if (Busy(worker, now)) {
    return worker.allowances.step > absl::ZeroDuration() ? worker.allowances.step
                                                         : options_.busy_timeout;
  }
  switch (worker.phase) {
    case v1::WORKER_PHASE_STARTING:
    case v1::WORKER_PHASE_INIT:
      return InitAllowance(worker);
    case v1::WORKER_PHASE_CHECKPOINT:
      return CheckpointAllowance(worker);
    case v1::WORKER_PHASE_STEP:
    case v1::WORKER_PHASE_EVAL:
      if (worker.allowances.step > absl::ZeroDuration()) return worker.allowances.step;
      if (worker.step_seconds.empty()) return InitAllowance(worker);
      return std::max(options_.step_floor,
                      absl::Seconds(options_.step_factor * P99(worker.step_seconds)));
    case v1::WORKER_PHASE_EXITED:
      return absl::InfiniteDuration();
    default:
      // UNSPECIFIED is never stored (Track starts at STARTING; Report keeps the phase); an
      // unknown future phase gets the most generous finite allowance rather than none.
      return std::max({InitAllowance(worker), CheckpointAllowance(worker), options_.step_floor});
  }
}

void LocalWatchdog::ReportHangsAgain() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, w] : workers_) w.hang_reported = false;
}

std::vector<HungRank> LocalWatchdog::Check() {
  const absl::Time now = clock_->Now();
  std::vector<HungRank> hung;
  absl::MutexLock lock(&mu_);
  for (auto& [key, w] : workers_) {
    if (w.hang_reported) continue;
    const absl::Duration allowance = AllowanceOf(w, now);
    // Silent since its last progress; past a busy spell, since the spell's last report (its
    // STEP allowance counts from there, not from a step many minutes before).
    const absl::Time since =
        !w.watched ? w.stalled_since
                   : (Busy(w, now) ? w.last_report : std::max(w.last_report, w.busy_heard));
    const absl::Duration silent = now - since;
    if (silent <= allowance) continue;
    w.hang_reported = true;
    HungRank& h = hung.emplace_back();
    h.job_id = key.first;
    h.generation = w.generation;
    h.rank = key.second;
    h.phase = w.phase;
    h.silent = silent;
    h.allowance = allowance;
    h.in_collective = !w.watched;
  }
  return hung;
}

absl::Duration LocalWatchdog::Allowance(const std::string& job_id, int rank) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(Key(job_id, rank));
  if (it == workers_.end()) return absl::InfiniteDuration();
  return AllowanceOf(it->second, clock_->Now());
}

}  // namespace ringmaster::agent
