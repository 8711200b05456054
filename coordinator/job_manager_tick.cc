// JobManager::Tick, the job manager's periodic work, one method per duty; and the deletion of
// ended jobs past their retention. The duties' order within a tick is Tick's order of calls.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"

namespace ringmaster::coordinator {
namespace {

// How often Tick looks for ended jobs past their retention, and the most it deletes at a time.
constexpr absl::Duration kPruneInterval = absl::Minutes(1);
constexpr size_t kMaxPrunedAtOnce = 500;
// The longest wait between Tick's retries of a store that refuses writes.
constexpr absl::Duration kMaxStoreRetryPause = absl::Seconds(30);
// How often a running job's gauges and its watchers' progress are pushed, at most.
constexpr absl::Duration kProgressPushInterval = absl::Seconds(1);

}  // namespace

using job_manager_internal::kPersistRetryInterval;
using job_manager_internal::UpdateOf;

void JobManager::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  PruneEndedJobsLocked(now);
  RetryUnsavedJobs(now);
  ExpireFailureSeries(now);
  // Something to place: a crash-loop or drain wait ended, devices were freed, or a job failed.
  bool changed = EndLaunchWaits(now);
  ExpireHangSuspects(now);
  changed |= FreeEndedDrains(now);
  changed |= DecidePendingHangs(now);
  changed |= FailUnreconciledJobs(now);
  changed |= EndSettling(now);
  PushProgress(now);
  if (changed) ScheduleLocked();
}

void JobManager::PruneEndedJobsLocked(absl::Time now) {
  if (options_.ended_job_retention <= absl::ZeroDuration() || now < next_prune_) return;
  next_prune_ = now + kPruneInterval;
  std::vector<std::string> gone;
  for (const std::string& id : order_) {
    const Job* job = Find(id);
    // A drain's ranks still checkpointing hold devices: kept until they are gone.
    if (!IsTerminal(job->status.state()) || job->unsaved || !job->status.stopping_ranks().empty() ||
        absl::FromUnixNanos(job->status.end_time_unix_nanos()) + options_.ended_job_retention >
            now) {
      continue;
    }
    gone.push_back(id);
    if (gone.size() == kMaxPrunedAtOnce) break;  // the rest at the next pass
  }
  if (gone.empty()) return;
  if (absl::Status deleted = store_->DeleteJobs(gone); !deleted.ok()) {
    RM_LOG(ERROR) << "deleting " << gone.size() << " ended jobs from the store: " << deleted;
    metrics_.CountStoreWriteError();
    return;  // the next pass tries again
  }
  const std::set<std::string> ids(gone.begin(), gone.end());
  order_.erase(std::remove_if(order_.begin(), order_.end(),
                              [&](const std::string& id) { return ids.count(id) > 0; }),
               order_.end());
  for (auto it = requests_.begin(); it != requests_.end();) {
    auto next = std::next(it);
    if (ids.count(it->second) > 0) requests_.erase(it);
    it = next;
  }
  for (const std::string& id : gone) {
    metrics_.ForgetFailed(id, &Find(id)->series);
    jobs_.erase(id);
  }
  RM_LOG(INFO) << "deleted " << gone.size() << " job(s) that ended more than "
               << absl::FormatDuration(options_.ended_job_retention) << " ago";
  UpdateStateGauges();
}

void JobManager::RetryUnsavedJobs(absl::Time now) {
  // A store that refuses a retry is left alone for a while, doubling up to 30 s: a locked
  // database makes each write wait out its busy timeout, under this lock.
  bool store_refused = now < store_retry_at_;
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (!job->unsaved || store_refused || now < job->retry_persist_at) continue;
    Persist(job);
    store_refused = job->unsaved;
    if (store_refused) {
      store_retry_pause_ =
          std::min(std::max(store_retry_pause_ * 2, kPersistRetryInterval), kMaxStoreRetryPause);
      store_retry_at_ = now + store_retry_pause_;
    } else {
      store_retry_pause_ = absl::ZeroDuration();
    }
  }
}

void JobManager::ExpireFailureSeries(absl::Time now) {
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (now >= job->series.failed_until) metrics_.ForgetFailed(id, &job->series);
  }
}

bool JobManager::EndLaunchWaits(absl::Time now) {
  bool ended = false;
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (job->status.state() != v1::JOB_STATE_RESTARTING ||
        job->launch_not_before == absl::InfinitePast() || now < job->launch_not_before) {
      continue;
    }
    job->launch_not_before = absl::InfinitePast();
    if (job->status.backoff_until_unix_nanos() > 0) {
      // The wait is over (the launch may still wait for capacity): no "next launch at" past.
      job->status.set_backoff_until_unix_nanos(0);
      Persist(job);
    }
    ended = true;
  }
  return ended;
}

void JobManager::ExpireHangSuspects(absl::Time now) {
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (!job->series.hang_suspects.empty() && now >= job->hang_suspects_until) {
      ClearHangSuspects(job);
    }
  }
}

bool JobManager::FreeEndedDrains(absl::Time now) {
  bool freed = false;
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (!IsTerminal(job->status.state()) || job->status.stopping_ranks().empty() ||
        now < absl::FromUnixNanos(job->status.stopping_deadline_unix_nanos())) {
      continue;
    }
    // A job that ended during a drain's wait: its ranks that did not exit by the deadline were
    // SIGKILLed, and their devices are free.
    nodes_->Release(id);
    job->status.clear_stopping_ranks();
    job->status.set_stopping_deadline_unix_nanos(0);
    Persist(job);
    freed = true;
  }
  return freed;
}

bool JobManager::DecidePendingHangs(absl::Time now) {
  bool declared = false;
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (job->status.state() != v1::JOB_STATE_RUNNING) continue;
    if (RejudgeSetAsideHangs(job, now)) {
      declared = true;
      continue;
    }
    if (job->gen.pending_hangs.empty()) continue;
    std::string unused;
    const bool evidence = !HangEvidence(*job, &unused).empty();
    // Each report due, oldest rank first, until one fails the job (a launch replaces the
    // generation, reports and all); one set aside leaves the job running.
    std::vector<GenerationState::PendingHang> due;
    for (const auto& [rank, pending] : job->gen.pending_hangs) {
      if (evidence || now >= pending.decide_by) due.push_back(pending);
    }
    for (const GenerationState::PendingHang& pending : due) {
      if (job->status.state() != v1::JOB_STATE_RUNNING) break;
      DeclareHang(job, pending.node, pending.state, pending.began);
    }
    declared |= job->status.state() != v1::JOB_STATE_RUNNING;
  }
  return declared;
}

bool JobManager::FailUnreconciledJobs(absl::Time now) {
  if (now - started_ < options_.reconcile_timeout) return false;
  bool failed = false;
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (job->status.state() != v1::JOB_STATE_RUNNING || job->gen.awaiting.empty()) continue;
    // A rank neither running nor reported as exited by its node: it is lost.
    const auto& [missing, ranks] = *job->gen.awaiting.begin();
    const std::string what =
        absl::StrCat("node ", missing, " did not report rank(s) ", absl::StrJoin(ranks, ", "),
                     " of the job after a coordinator restart");
    const std::string node = missing;
    job->gen.awaiting.clear();
    Fail(job, what, /*fatal=*/false, now, node);
    failed = true;
  }
  return failed;
}

void JobManager::PushProgress(absl::Time now) {
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (job->status.state() != v1::JOB_STATE_RUNNING ||
        now - job->last_progress_push < kProgressPushInterval) {
      continue;
    }
    if (metrics_.enabled()) {
      const v1::JobProgress& p = job->status.progress();
      metrics_.SetProgress(id, job->recovery.Goodput(now), p.step(), p.tokens_per_second());
      ExportCheckpointSeries(job);
    }
    if (job->progress_dirty) {
      v1::WatchJobResponse update = UpdateOf(job->status);
      *update.mutable_progress() = job->status.progress();
      for (auto& [watch_id, callback] : job->watchers) callback(update);
      job->progress_dirty = false;
      job->last_progress_push = now;
    }
  }
}

}  // namespace ringmaster::coordinator
