#include "agent/local_watchdog.h"

#include <algorithm>
#include <utility>

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

}  // namespace

LocalWatchdog::LocalWatchdog(Clock* clock, WatchdogOptions options)
    : clock_(clock), options_(std::move(options)) {}

void LocalWatchdog::Track(const std::string& job_id, int64_t generation, int rank,
                          absl::Duration step_timeout, WatchFrom watch_from) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[Key(job_id, rank)];
  w = Worker();
  w.generation = generation;
  w.last_report = now;
  w.step_timeout = step_timeout;
  w.watched = watch_from == WatchFrom::kLaunch;
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
  if (generation > w.generation) {
    const absl::Duration step_timeout = w.step_timeout;
    w = Worker();
    w.generation = generation;
    w.step_timeout = step_timeout;
  }
  w.last_report = now;
  w.hang_reported = false;
  w.watched = true;
  if (phase != v1::WORKER_PHASE_UNSPECIFIED) w.phase = phase;
  if (step_seconds > 0) {
    w.step_seconds.push_back(step_seconds);
    while (static_cast<int>(w.step_seconds.size()) > std::max(1, options_.step_window)) {
      w.step_seconds.pop_front();
    }
  }
}

void LocalWatchdog::Untrack(const std::string& job_id, int64_t generation, int rank) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(Key(job_id, rank));
  if (it != workers_.end() && it->second.generation <= generation) workers_.erase(it);
}

absl::Duration LocalWatchdog::AllowanceOf(const Worker& worker) const {
  if (!worker.watched) return absl::InfiniteDuration();
  switch (worker.phase) {
    case v1::WORKER_PHASE_STARTING:
    case v1::WORKER_PHASE_INIT:
      return options_.init_timeout;
    case v1::WORKER_PHASE_CHECKPOINT:
      return options_.checkpoint_timeout;
    case v1::WORKER_PHASE_STEP:
    case v1::WORKER_PHASE_EVAL:
      if (worker.step_timeout > absl::ZeroDuration()) return worker.step_timeout;
      if (worker.step_seconds.empty()) return options_.init_timeout;
      return std::max(options_.step_floor,
                      absl::Seconds(options_.step_factor * P99(worker.step_seconds)));
    case v1::WORKER_PHASE_EXITED:
      return absl::InfiniteDuration();
    default:
      // UNSPECIFIED is never stored (Track starts at STARTING; Report keeps the phase); an
      // unknown future phase gets the most generous finite allowance rather than none.
      return std::max({options_.init_timeout, options_.checkpoint_timeout, options_.step_floor});
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
    const absl::Duration allowance = AllowanceOf(w);
    const absl::Duration silent = now - w.last_report;
    if (silent <= allowance) continue;
    w.hang_reported = true;
    HungRank& h = hung.emplace_back();
    h.job_id = key.first;
    h.generation = w.generation;
    h.rank = key.second;
    h.phase = w.phase;
    h.silent = silent;
    h.allowance = allowance;
  }
  return hung;
}

absl::Duration LocalWatchdog::Allowance(const std::string& job_id, int rank) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(Key(job_id, rank));
  if (it == workers_.end()) return absl::InfiniteDuration();
  return AllowanceOf(it->second);
}

}  // namespace ringmaster::agent
