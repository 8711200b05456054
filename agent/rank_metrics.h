// Per-rank metrics of one agent, fed by the workers' step reports, and the compact summaries the
// agent forwards to the coordinator.
//
// Metrics (labels: job_id, rank, plus op/group for collectives), all in base units:
//   ringmaster_step_seconds             histogram of step wall time
//   ringmaster_step                     gauge, last completed step
//   ringmaster_loss                     gauge
//   ringmaster_grad_norm                gauge, the step's global gradient norm before clipping
//                                       (only for workers that report one)
//   ringmaster_input_seconds            gauge, seconds of the last step waiting for the next
//                                       batch (0 for workers that report none)
//   ringmaster_tokens_per_second        gauge, this rank's tokens / step seconds
//   ringmaster_compute_seconds          gauge, compute seconds of the last step
//   ringmaster_communication_seconds    gauge, communication seconds of the last step
//   ringmaster_collective_algbw_bytes_per_second{op,group}   gauge, last step
//   ringmaster_collective_busbw_bytes_per_second{op,group}   gauge, last step
//   ringmaster_collective_seconds_total{op,group}            counter
//   ringmaster_last_report_age_seconds  gauge, refreshed by Refresh()
//   ringmaster_mfu                      gauge, model FLOPs utilisation of the last step
//   ringmaster_state_bytes              gauge, bytes of parameters, gradients, optimizer state
//   ringmaster_stage_compute_seconds    gauge, the rank's pipeline-stage compute in the last step
//   ringmaster_bubble_ratio             gauge, the stage's measured idle share of the last step
//   ringmaster_checkpoint_step          gauge, newest checkpoint committed (from phase reports)
//   ringmaster_checkpoint_seconds       gauge, how long that checkpoint took
//   ringmaster_collective_sequence{group,kind}  gauge, last collective entered / completed
//   ringmaster_worker_phase{phase}      gauge, 1 for the phase the rank last reported
//                                       (kind = entered|completed) per communicator: the rank
//                                       whose entered number lags its group's is the one the
//                                       others wait for
// Ranks of a job that ended are removed with ForgetJob, so cardinality stays bounded by the
// ranks on this node.
//
// Summaries: at most one StepSummary per rank per `summary_interval` is produced by
// TakeSummaries(), carrying the latest report; the coordinator's load grows with ranks per
// interval, not with steps.
//
// Thread-safe.
#ifndef RINGMASTER_AGENT_RANK_METRICS_H_
#define RINGMASTER_AGENT_RANK_METRICS_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/report_validation.h"
#include "common/clock.h"
#include "common/metrics/registry.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/worker.pb.h"

namespace ringmaster::agent {

class RankMetrics {
 public:
  // `registry` and `clock` must outlive this object.
  RankMetrics(metrics::Registry* registry, Clock* clock, absl::Duration summary_interval);
  ~RankMetrics();

  // At most this many ringmaster_collective_{algbw,busbw,seconds} (op, group) series per rank,
  // and twice as many ringmaster_collective_sequence series; pairs beyond them are not exported.
  static constexpr size_t kMaxCollectiveSeriesPerRank = kMaxReportedCollectives;

  // Records a step report (the caller has checked the worker's identity and generation, and the
  // report's form: report_validation.h). Idempotent per step: a step at or below the rank's last
  // one only counts as a report. A report of a newer generation starts the rank's summary over; one
  // of an older generation is ignored.
  void OnStep(const v1::ReportStepRequest& report);
  // Records a phase change (for summaries and the last-report age); a checkpoint_step > 0 raises
  // the summary's checkpoint_step. Generations as for OnStep.
  void OnPhase(const v1::ReportPhaseRequest& report);
  // Records the worker's collective sequence numbers for the summaries and metrics, and makes the
  // rank's summary due (a live process thus reaches the coordinator about once per
  // summary_interval even while it makes no progress). Not a report of progress: the last-report
  // age is left alone (a rank whose only reports are these has none). Ignored for older
  // generations. The Python watch sends them from init_process_group on, so the coordinator
  // hears the numbers of a rank that has not stepped yet (one stuck before its first step).
  // They also make the summaries' `working` (a rank that stepped in this generation and works
  // outside any collective as the summary is taken: agent/working_rank.h); a report that says
  // the watch ended forgets them. Its stack (a stalled Python rank's) goes in the next summary
  // if it changed (StepSummary.stack); a step or phase report clears it. A report with only a
  // stack (working_rank.h's StackOnly: sent before init_process_group) sets the stack alone, and
  // only while the rank's summary has no numbers.
  void OnCollectives(const v1::ReportCollectivesRequest& report);

  // Updates ringmaster_last_report_age_seconds for every rank.
  void Refresh();

  // Summaries of ranks that reported since their last summary and whose last summary is at least
  // summary_interval old. A summary carrying a process's first step (its startup figures) is due
  // at once: it happens once per process and recovery is timed from it.
  std::vector<v1::StepSummary> TakeSummaries();

  // Makes every rank's summary due again (at the next TakeSummaries within summary_interval),
  // carrying its latest state and no new step: called on a new stream to the coordinator, which
  // may have restarted and know none of them, while a rank may be silent now (torch 1.13 holds the
  // GIL while init_process_group waits for its peers: its watch reported once, before).
  // `running`: the (job, rank)s of this node's live workers; no other rank's summary goes.
  void SummarizeAgain(const std::set<std::pair<std::string, int>>& running);

  // The rank's last summary taken was not sent (no stream): its next one carries its stack
  // (StepSummary.stack) whether or not it changed. Not due for that alone: a stalled rank's
  // watch reports every second, and a new stream makes every running rank's due.
  void StackUnsent(const std::string& job_id, int rank);

  // The rank's summary if it changed since the last one taken, whatever its age: a worker that
  // exits sends its last state before its exit is reported.
  std::optional<v1::StepSummary> TakePendingSummary(const std::string& job_id, int rank);

  // Seconds since the rank's last step or phase report; -1 if it made none.
  double LastReportAgeSeconds(const std::string& job_id, int rank) const;

  // Drops every series and summary state of the job, whose workers of `generation` and older are
  // all gone: their later reports (one that raced with the last exit) are ignored, so they cannot
  // bring the series back.
  void ForgetJob(const std::string& job_id, int64_t generation);

 private:
  struct Rank;
  using RankKey = std::pair<std::string, int>;  // (job_id, rank)

  // The state of the worker's rank, created on its first report and reset when a newer
  // generation reports; null for a report from an older generation than the rank's current one.
  // `alive`: the report is a sign of life (resets the last-report age).
  Rank* Accept(const v1::WorkerIdentity& worker, bool alive) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetSequences(Rank* rank, const google::protobuf::Map<std::string, int64_t>& entered,
                    const google::protobuf::Map<std::string, int64_t>& completed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank's summary, marked taken at `now` (its per-summary figures start over).
  v1::StepSummary Take(Rank* rank, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Exports `phase` as the rank's ringmaster_worker_phase series (replacing the previous one).
  void SetPhase(Rank* rank, v1::WorkerPhase phase) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops exporting every series of `rank`.
  void RemoveSeries(const Rank& rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const absl::Duration summary_interval_;
  // Families live as long as the registry.
  metrics::HistogramFamily* const step_seconds_;
  metrics::GaugeFamily* const step_;
  metrics::GaugeFamily* const loss_;
  metrics::GaugeFamily* const tokens_per_second_;
  metrics::GaugeFamily* const compute_seconds_;
  metrics::GaugeFamily* const communication_seconds_;
  metrics::GaugeFamily* const collective_algbw_;
  metrics::GaugeFamily* const collective_busbw_;
  metrics::CounterFamily* const collective_seconds_;
  metrics::GaugeFamily* const last_report_age_;
  metrics::GaugeFamily* const mfu_;
  metrics::GaugeFamily* const state_bytes_;
  metrics::GaugeFamily* const grad_norm_;
  metrics::GaugeFamily* const input_seconds_;
  metrics::GaugeFamily* const stage_compute_seconds_;
  metrics::GaugeFamily* const bubble_ratio_;
  metrics::GaugeFamily* const checkpoint_step_;
  metrics::GaugeFamily* const checkpoint_seconds_;
  metrics::GaugeFamily* const worker_phase_;
  metrics::GaugeFamily* const collective_sequence_;

  mutable absl::Mutex mu_;
  std::map<RankKey, std::unique_ptr<Rank>> ranks_ ABSL_GUARDED_BY(mu_);
  // The newest generation forgotten, by job, until a newer one reports. Bounded: past the bound
  // an arbitrary entry goes, which only lets that job's late reports through again.
  std::map<std::string, int64_t> forgotten_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_RANK_METRICS_H_
