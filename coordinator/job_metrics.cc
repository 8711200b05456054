#include "coordinator/job_metrics.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/job_state.h"

namespace ringmaster::coordinator {
namespace {

// ringmaster_recovery_seconds's phases, in RecoveryPhases' order.
constexpr const char* kRecoveryPhases[] = {"detect",     "place",   "stop",       "rendezvous",
                                           "link_check", "restore", "first_step", "total"};

}  // namespace

JobMetrics::JobMetrics(metrics::Registry* registry) {
  if (registry == nullptr) return;
  jobs_by_state_ = &registry->AddGauge("ringmaster_jobs", "Jobs by state.", {"state"});
  restarts_ = &registry->AddCounter("ringmaster_job_restarts_total",
                                    "Restarts of a job after a failure.", {"job_id"});
  hangs_ = &registry->AddCounter("ringmaster_job_hangs_total",
                                 "Ranks of a job reported hung by their agent.", {"job_id"});
  resumes_behind_ = &registry->AddCounter(
      "ringmaster_job_resumes_behind_checkpoint_total",
      "Generations of the job that resumed from an older step than its newest complete "
      "checkpoint (rank 0 could not use the newer ones; its log says why).",
      {"job_id"});
  submitted_ =
      registry->AddCounter("ringmaster_jobs_submitted_total", "Jobs accepted.").WithLabels({});
  store_errors_ = registry
                      ->AddCounter("ringmaster_store_write_errors_total",
                                   "Writes of a job's state to the coordinator's store that "
                                   "failed (retried each second until one succeeds; meanwhile "
                                   "a coordinator restart would lose the change).")
                      .WithLabels({});
  scheduling_pass_seconds_ =
      registry
          ->AddHistogram("ringmaster_scheduling_pass_seconds",
                         "Time one scheduling pass takes: every waiting job tried in order, "
                         "placed or given its reason (the coordinator's job lock is held).",
                         {}, metrics::ExponentialBuckets(0.00001, 4, 12))
          .WithLabels({});
  held_devices_ = &registry->AddGauge(
      "ringmaster_devices_held",
      "Devices held for the first job of the scheduling order that does not fit, so that jobs "
      "after it do not take them (state idle: free now, waiting for the rest; busy: still "
      "running another job).",
      {"job_id", "state"});
  stragglers_ = &registry->AddGauge(
      "ringmaster_straggler",
      "1 while the rank is flagged as a straggler (compute time above the median of the "
      "other ranks of its pipeline stage, or for a stage's only rank its slowdown over the "
      "other stages', by the job's threshold), 0 once cleared; only ranks ever flagged.",
      {"job_id", "rank"});
  hang_suspects_ = &registry->AddGauge(
      "ringmaster_hang_suspect",
      "1 for each rank named by the job's latest hang (it did not reach the collective its "
      "group waits in), until 5 minutes after the job recovered.",
      {"job_id", "rank"});
  recovery_seconds_ = &registry->AddGauge(
      "ringmaster_recovery_seconds",
      "Phases of the job's latest recovery: detect, place, stop, rendezvous, link_check, "
      "restore, first_step, and total (failure to every rank's first step).",
      {"job_id", "phase"});
  goodput_ = &registry->AddGauge(
      "ringmaster_goodput_ratio",
      "Share of the job's wall time since it first ran that produced steps it kept (work "
      "lost to restarts taken back).",
      {"job_id"});
  job_step_ = &registry->AddGauge("ringmaster_job_step",
                                  "Lowest step completed by every rank of the job.", {"job_id"});
  job_tokens_per_second_ = &registry->AddGauge("ringmaster_job_tokens_per_second",
                                               "Tokens per second of the whole job.", {"job_id"});
  job_checkpoint_step_ =
      &registry->AddGauge("ringmaster_job_checkpoint_step",
                          "Step of the job's newest complete checkpoint.", {"job_id"});
  slow_links_ = &registry->AddGauge(
      "ringmaster_slow_link",
      "The latest link check's slow or data-corrupting links: the link's bandwidth over the "
      "median of the other links of its kind (watchdog.slow_link_ratio is the threshold; 0 "
      "when a corrupting link had none to compare with). At most 16 per job.",
      {"job_id", "group", "rank", "peer_rank", "node", "peer_node"});
  link_bandwidth_ = &registry->AddGauge(
      "ringmaster_link_bandwidth_bytes_per_second",
      "The latest link check's bandwidth (bytes each way per second) over the job's links of "
      "one kind: the group kind (tp, pp, dp, emb), whether the ends are on different nodes "
      "(scope inter_node or intra_node), and the median or the lowest link (stat).",
      {"job_id", "kind", "scope", "stat"});
  job_checkpoint_time_ = &registry->AddGauge(
      "ringmaster_job_last_checkpoint_timestamp_seconds",
      "When the coordinator learnt of the job's newest complete checkpoint (Unix seconds).",
      {"job_id"});
  checkpoint_failures_ = &registry->AddCounter(
      "ringmaster_job_checkpoint_failures_total",
      "Checkpoints of the job that could not be saved (a rank could not write its file, or "
      "rank 0 the MANIFEST), each counted once however many ranks failed; the "
      "\"checkpoint_failed\" events say why. Jobs with a checkpoint.dir.",
      {"job_id"});
  steps_since_checkpoint_ = &registry->AddGauge(
      "ringmaster_job_steps_since_checkpoint",
      "Steps the running job trained since the checkpoint a restart would resume from (its "
      "newest committed one, or the step its generation started from): what a restart now "
      "loses. Jobs with periodic checkpoints, from their start.",
      {"job_id"});
  checkpoint_interval_steps_ = &registry->AddGauge(
      "ringmaster_job_checkpoint_interval_steps",
      "checkpoint.every_steps of the running job (jobs with periodic checkpoints).", {"job_id"});
  data_parallel_ = &registry->AddGauge(
      "ringmaster_job_data_parallel",
      "Data-parallel degree of the job's current generation, and the degree it asks for "
      "(which=current|desired); an elastic job (min_nodes) that runs on fewer nodes has current "
      "below desired. From its first launch until it ends.",
      {"job_id", "which"});
  job_failed_ = &registry->AddGauge(
      "ringmaster_job_failed_timestamp_seconds",
      "When the job failed for good (Unix seconds): a fatal error, or its restarts ran out. "
      "Exported for an hour after the failure.",
      {"job_id"});
}

void JobMetrics::SetJobsByState(const StateCounts& counts) {
  if (!enabled()) return;
  for (int s = v1::JOB_STATE_PENDING; s <= v1::JOB_STATE_CANCELLED; ++s) {
    jobs_by_state_->WithLabels({absl::AsciiStrToLower(StateName(static_cast<v1::JobState>(s)))})
        ->Set(counts[s]);
  }
}

void JobMetrics::CountSubmitted() {
  if (submitted_ != nullptr) submitted_->Increment();
}

void JobMetrics::CountStoreWriteError() {
  if (store_errors_ != nullptr) store_errors_->Increment();
}

void JobMetrics::ObserveSchedulingPass(absl::Duration took) {
  if (scheduling_pass_seconds_ != nullptr) {
    scheduling_pass_seconds_->Observe(absl::ToDoubleSeconds(took));
  }
}

void JobMetrics::SetHold(const std::string& previous_job, const std::string& job_id, int idle,
                         int busy) {
  if (!enabled()) return;
  if (!previous_job.empty() && previous_job != job_id) {
    held_devices_->Remove({previous_job, "idle"});
    held_devices_->Remove({previous_job, "busy"});
  }
  if (job_id.empty()) return;
  held_devices_->WithLabels({job_id, "idle"})->Set(idle);
  held_devices_->WithLabels({job_id, "busy"})->Set(busy);
}

void JobMetrics::StartJob(const std::string& job_id, bool checkpoints) {
  if (!enabled()) return;
  restarts_->WithLabels({job_id});
  hangs_->WithLabels({job_id});
  resumes_behind_->WithLabels({job_id});
  if (checkpoints) checkpoint_failures_->WithLabels({job_id});
}

void JobMetrics::ForgetJob(const std::string& job_id, JobSeries* series) {
  if (!enabled()) return;
  restarts_->Remove({job_id});
  hangs_->Remove({job_id});
  resumes_behind_->Remove({job_id});
  checkpoint_failures_->Remove({job_id});
  steps_since_checkpoint_->Remove({job_id});
  checkpoint_interval_steps_->Remove({job_id});
  for (int r : series->stragglers) stragglers_->Remove({job_id, absl::StrCat(r)});
  series->stragglers.clear();
  ClearHangSuspects(job_id, series);
  if (series->recovery) {
    for (const char* phase : kRecoveryPhases) recovery_seconds_->Remove({job_id, phase});
    series->recovery = false;
  }
  for (metrics::GaugeFamily* f :
       {goodput_, job_step_, job_tokens_per_second_, job_checkpoint_step_, job_checkpoint_time_}) {
    f->Remove({job_id});
  }
  ForgetLinks(series);
  data_parallel_->Remove({job_id, "current"});
  data_parallel_->Remove({job_id, "desired"});
}

void JobMetrics::SetDataParallel(const std::string& job_id, int current, int desired) {
  if (!enabled()) return;
  data_parallel_->WithLabels({job_id, "current"})->Set(current);
  data_parallel_->WithLabels({job_id, "desired"})->Set(desired);
}

void JobMetrics::CountRestart(const std::string& job_id) {
  if (enabled()) restarts_->WithLabels({job_id})->Increment();
}

void JobMetrics::CountHang(const std::string& job_id) {
  if (enabled()) hangs_->WithLabels({job_id})->Increment();
}

void JobMetrics::CountResumeBehind(const std::string& job_id) {
  if (enabled()) resumes_behind_->WithLabels({job_id})->Increment();
}

void JobMetrics::CountCheckpointFailure(const std::string& job_id) {
  if (enabled()) checkpoint_failures_->WithLabels({job_id})->Increment();
}

void JobMetrics::SetStraggler(const std::string& job_id, int rank, bool flagged,
                              JobSeries* series) {
  if (!enabled()) return;
  stragglers_->WithLabels({job_id, absl::StrCat(rank)})->Set(flagged ? 1 : 0);
  series->stragglers.insert(rank);
}

void JobMetrics::SetHangSuspects(const std::string& job_id, const std::vector<int>& ranks,
                                 JobSeries* series) {
  if (!enabled()) return;
  ClearHangSuspects(job_id, series);
  for (int r : ranks) {
    hang_suspects_->WithLabels({job_id, absl::StrCat(r)})->Set(1);
    series->hang_suspects.insert(r);
  }
}

void JobMetrics::ClearHangSuspects(const std::string& job_id, JobSeries* series) {
  if (enabled()) {
    for (int r : series->hang_suspects) hang_suspects_->Remove({job_id, absl::StrCat(r)});
  }
  series->hang_suspects.clear();
}

void JobMetrics::SetRecovery(const std::string& job_id, const RecoveryPhases& phases,
                             JobSeries* series) {
  if (!enabled()) return;
  const double values[] = {phases.detect,     phases.place,   phases.stop,       phases.rendezvous,
                           phases.link_check, phases.restore, phases.first_step, phases.total};
  for (size_t i = 0; i < std::size(values); ++i) {
    recovery_seconds_->WithLabels({job_id, kRecoveryPhases[i]})->Set(values[i]);
  }
  series->recovery = true;
}

void JobMetrics::SetProgress(const std::string& job_id, double goodput, int64_t step,
                             double tokens_per_second) {
  if (!enabled()) return;
  const std::vector<std::string> labels = {job_id};
  goodput_->WithLabels(labels)->Set(goodput);
  job_step_->WithLabels(labels)->Set(static_cast<double>(step));
  job_tokens_per_second_->WithLabels(labels)->Set(tokens_per_second);
}

void JobMetrics::SetCheckpointStep(const std::string& job_id, int64_t step) {
  if (enabled()) job_checkpoint_step_->WithLabels({job_id})->Set(static_cast<double>(step));
}

void JobMetrics::SetCheckpointTime(const std::string& job_id, absl::Time when) {
  if (enabled()) {
    job_checkpoint_time_->WithLabels({job_id})->Set(
        absl::ToDoubleSeconds(when - absl::UnixEpoch()));
  }
}

void JobMetrics::SetStepsSinceCheckpoint(const std::string& job_id, int64_t steps) {
  if (enabled()) steps_since_checkpoint_->WithLabels({job_id})->Set(static_cast<double>(steps));
}

void JobMetrics::SetCheckpointInterval(const std::string& job_id, int64_t steps) {
  if (enabled()) {
    checkpoint_interval_steps_->WithLabels({job_id})->Set(static_cast<double>(steps));
  }
}

void JobMetrics::AddSlowLink(const std::string& job_id, const v1::LinkState& link,
                             JobSeries* series) {
  if (!enabled()) return;
  std::vector<std::string> labels = {
      job_id,      link.group(),    absl::StrCat(link.rank()), absl::StrCat(link.peer_rank()),
      link.node(), link.peer_node()};
  slow_links_->WithLabels(labels)->Set(link.baseline_bytes_per_second() > 0
                                           ? link.bytes_per_second() /
                                                 link.baseline_bytes_per_second()
                                           : 0);
  series->slow_links.push_back(std::move(labels));
}

void JobMetrics::SetLinkBandwidth(const std::string& job_id, const v1::LinkCheckSummary& summary,
                                  JobSeries* series) {
  if (!enabled()) return;
  for (const v1::LinkClass& c : summary.classes()) {
    const char* scope = c.cross_node() ? "inter_node" : "intra_node";
    for (const auto& [stat, value] :
         {std::pair<const char*, double>{"median", c.median_bytes_per_second()},
          {"min", c.min_bytes_per_second()}}) {
      std::vector<std::string> labels = {job_id, c.kind(), scope, stat};
      link_bandwidth_->WithLabels(labels)->Set(value);
      series->link_bandwidth.push_back(std::move(labels));
    }
  }
}

void JobMetrics::ForgetLinks(JobSeries* series) {
  if (!enabled()) return;
  for (const auto& labels : series->slow_links) slow_links_->Remove(labels);
  for (const auto& labels : series->link_bandwidth) link_bandwidth_->Remove(labels);
  series->slow_links.clear();
  series->link_bandwidth.clear();
}

void JobMetrics::SetFailed(const std::string& job_id, absl::Time failed, absl::Time until,
                           JobSeries* series) {
  if (!enabled()) return;
  series->failed_until = until;
  job_failed_->WithLabels({job_id})->Set(absl::ToDoubleSeconds(failed - absl::UnixEpoch()));
}

void JobMetrics::ForgetFailed(const std::string& job_id, JobSeries* series) {
  if (series->failed_until == absl::InfinitePast()) return;
  job_failed_->Remove({job_id});
  series->failed_until = absl::InfinitePast();
}

}  // namespace ringmaster::coordinator
