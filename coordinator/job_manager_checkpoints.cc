// JobManager's view of a job's checkpoints: the saves its ranks could not make (counted, and
// events throttled so that a failing disk does not flood the store), the commit that ends a run
// of failures, what a restart lost of what was trained, and the series the checkpoint alerts
// read. The per-job state is in job_manager_internal.h and generation_state.h.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/one_line.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"

namespace ringmaster::coordinator {
namespace {

// An error with its numbers elided ("create /c/step-#/rank-#.bin.tmp.#: No space left on
// device"): the failures of one cause differ only in their steps, ranks and pids.
std::string ErrorKind(const std::string& error) {
  std::string kind;
  for (char c : error) {
    const bool digit = std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (!digit) {
      kind.push_back(c);
    } else if (kind.empty() || kind.back() != '#') {
      kind.push_back('#');
    }
  }
  return kind;
}

// 1, 10, 100, ...: the failures in a row that are events although their error is of the same
// kind as the one before.
bool PowerOfTen(int64_t n) {
  while (n >= 10 && n % 10 == 0) n /= 10;
  return n == 1;
}

bool PeriodicCheckpoints(const v1::JobSpec& spec) {
  return !spec.checkpoint().dir().empty() && spec.checkpoint().every_steps() > 0;
}

}  // namespace

void JobManager::OnCheckpointFailure(const v1::CheckpointFailure& failure) {
  absl::MutexLock lock(&mu_);
  Job* job = Find(failure.job().job_id());
  if (job == nullptr || job->status.state() != v1::JOB_STATE_RUNNING ||
      failure.job().generation() != job->status.generation() || failure.rank() < 0 ||
      failure.rank() >= job->status.assignments_size() || failure.step() < 1) {
    return;
  }
  // Another rank's report of a checkpoint counted already (or of an older one, arriving late).
  if (failure.step() <= job->gen.failed_checkpoint_step) return;
  job->gen.failed_checkpoint_step = failure.step();
  ++job->checkpoint_failures;
  // Bounded again: an agent's text is input.
  const std::string error = OneLine(failure.error(), kExitReasonBytes);
  const std::string kind = ErrorKind(error);
  const bool new_kind = kind != job->last_checkpoint_error_kind;
  job->last_failed_checkpoint = failure.step();
  job->last_failed_generation = failure.job().generation();
  job->last_checkpoint_error = error;
  job->last_checkpoint_error_kind = kind;
  const std::string& id = job->status.job_id();
  metrics_.CountCheckpointFailure(id);
  const int64_t n = job->checkpoint_failures;
  if (!new_kind && !PowerOfTen(n)) return;

  const v1::CheckpointSpec& spec = job->status.spec().checkpoint();
  const std::string newest =
      job->newest_checkpoint_step > 0
          ? absl::StrCat("the newest committed checkpoint (step ", job->newest_checkpoint_step, ")")
          : std::string("the job's start (no checkpoint committed yet)");
  const std::string policy =
      spec.max_consecutive_failures() > 0
          ? absl::StrCat("the job fails after ", spec.max_consecutive_failures(),
                         " in a row in one generation (checkpoint.max_consecutive_failures; "
                         "this generation has had ",
                         failure.consecutive_failures(), ")")
          : std::string("training goes on (checkpoint.max_consecutive_failures is 0)");
  v1::JobEvent& event = AddEvent(
      job, "checkpoint_failed",
      absl::StrCat("checkpoint at step ", failure.step(), " in ", spec.dir(),
                   " could not be saved: rank ", failure.rank(), ": ", error, ". ", n,
                   n == 1 ? " save" : " saves", " failed since ", newest, "; ", policy,
                   ". Failures of the same kind are events at the 10th, 100th, ... in a row; "
                   "ringmaster_job_checkpoint_failures_total counts them all"));
  event.set_step(failure.step());
  event.add_ranks(failure.rank());
  Persist(job);
}

void JobManager::OnCheckpointCommitted(Job* job, int64_t step) {
  // A commit older than the failure, of the same generation, is a late report: no end of it.
  if (job->checkpoint_failures == 0 || (job->last_failed_generation == job->status.generation() &&
                                        step < job->last_failed_checkpoint)) {
    return;
  }
  v1::JobEvent& event = AddEvent(
      job, "checkpoint",
      absl::StrCat("checkpoint at step ", step, " committed after ", job->checkpoint_failures,
                   job->checkpoint_failures == 1 ? " save" : " saves",
                   " that failed (the last at step ", job->last_failed_checkpoint, ": ",
                   job->last_checkpoint_error, ")"));
  event.set_step(step);
  job->checkpoint_failures = 0;
  job->last_checkpoint_error_kind.clear();
  // Persisted by the caller, with the new checkpoint.
}

std::string JobManager::StepsLost(const Job& job, int64_t start_step) const {
  const GenerationState::AtLaunch& before = job.gen.at_launch;
  const int64_t lost = before.trained - start_step;
  if (lost <= 0) return "";
  const v1::CheckpointSpec& spec = job.status.spec().checkpoint();
  std::string why;
  if (spec.dir().empty()) {
    why = "checkpointing is off: no checkpoint.dir";
  } else if (spec.every_steps() <= 0) {
    why = "no periodic checkpoints: checkpoint.every_steps is 0";
  } else if (start_step < job.gen.checkpoint_at_launch) {
    why = absl::StrCat("the newest checkpoint, at step ", job.gen.checkpoint_at_launch,
                       ", could not be used: see the resumed_behind event");
  } else {
    const std::string failed =
        before.failures > 0
            ? absl::StrCat(before.failures, before.failures == 1 ? " save" : " saves",
                           " failed, the last at step ", before.last_failed, ": ",
                           before.last_error)
            : "";
    if (job.gen.checkpoint_at_launch <= 0) {
      why = failed.empty() ? absl::StrCat("no checkpoint had been committed yet (one every ",
                                          spec.every_steps(), " steps)")
                           : absl::StrCat("no checkpoint was ever committed: ", failed);
    } else {
      why = failed.empty() ? absl::StrCat("the steps since the newest checkpoint, at step ",
                                          job.gen.checkpoint_at_launch, " (one every ",
                                          spec.every_steps(), " steps)")
                           : absl::StrCat("the newest checkpoint is at step ",
                                          job.gen.checkpoint_at_launch, "; since then ", failed);
    }
  }
  return absl::StrCat("resumed from step ", start_step, ": ", lost, " trained steps lost (", why,
                      ")");
}

void JobManager::ExportCheckpointSeries(Job* job) {
  const std::string& id = job->status.job_id();
  const v1::JobProgress& p = job->status.progress();
  const bool periodic = PeriodicCheckpoints(job->status.spec());
  if (p.checkpoint_step() > 0) {
    metrics_.SetCheckpointStep(id, p.checkpoint_step());
    // Unknown after a coordinator restart until the next checkpoint is reported: no sample
    // rather than -Inf.
    if (job->last_checkpoint_time != absl::InfinitePast()) {
      metrics_.SetCheckpointTime(id, job->last_checkpoint_time);
    }
  } else if (periodic && job->newest_checkpoint_step <= 0) {
    // None yet: step 0, where a restart would begin.
    metrics_.SetCheckpointStep(id, 0);
  }
  if (!periodic) return;
  // Where a restart would resume: this generation's newest commit, else where it started.
  const int64_t base = std::max(p.checkpoint_step(), job->gen.start_step);
  metrics_.SetStepsSinceCheckpoint(id, std::max<int64_t>(0, p.step() - base));
  metrics_.SetCheckpointInterval(id, job->status.spec().checkpoint().every_steps());
}

}  // namespace ringmaster::coordinator
