#include "agent/rank_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/working_rank.h"
#include "common/metrics/metric.h"

namespace ringmaster::agent {
namespace {

// Jobs whose late reports are refused after ForgetJob: more than ever end on one node in a while.
constexpr size_t kMaxForgottenJobs = 4096;

const std::vector<std::string> kRankLabels = {"job_id", "rank"};
const std::vector<std::string> kCollectiveLabels = {"job_id", "rank", "op", "group"};
const std::vector<std::string> kSequenceLabels = {"job_id", "rank", "group", "kind"};

// {job_id, rank, phase} of a rank's ringmaster_worker_phase series ("init", "step", ...).
std::vector<std::string> PhaseLabels(const std::vector<std::string>& rank_labels,
                                     v1::WorkerPhase phase) {
  return {rank_labels[0], rank_labels[1],
          absl::AsciiStrToLower(absl::StripPrefix(v1::WorkerPhase_Name(phase), "WORKER_PHASE_"))};
}

// 1 ms, 2 ms, 4 ms, ... 262 s (about 4.4 min): 19 doublings cover steps of tiny CPU models and
// of large models alike; slower steps land in +Inf.
std::vector<double> StepSecondsBuckets() { return metrics::ExponentialBuckets(0.001, 2, 19); }

std::vector<std::string> CollectiveLabels(const std::vector<std::string>& rank_labels,
                                          const std::string& op, const std::string& group) {
  return {rank_labels[0], rank_labels[1], op, group};
}

// Steps the summaries' step-time percentiles cover, per rank.
constexpr size_t kStepTimeWindow = 100;

// The nearest-rank `q` quantile (in (0, 1]) of `values` (not empty).
double NearestRank(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  index = std::clamp<size_t>(index, 1, values.size());
  return values[index - 1];
}

}  // namespace

struct RankMetrics::Rank {
  std::vector<std::string> labels;  // {job_id, rank}, as exported.
  int64_t generation = 0;
  absl::Time last_report;
  // Steps at or below this one were recorded already (in this generation).
  int64_t last_step = std::numeric_limits<int64_t>::min();
  // The next summary: always the latest state. `pending` when it changed since the last one taken.
  v1::StepSummary summary;
  bool pending = false;
  bool startup_pending = false;  // `summary` holds the process's first step, not yet taken
  absl::Time last_summary = absl::InfinitePast();

  // Created on the first step or phase report: a rank whose only reports are collectives ones
  // (the Python watch's before a first step) has no age, which RingmasterJobHung would read as a
  // silent stepping rank.
  std::shared_ptr<metrics::Gauge> last_report_age;
  // Created on the first step report, so a rank that has not stepped yet shows no loss of 0.
  std::shared_ptr<metrics::Histogram> step_seconds;
  std::shared_ptr<metrics::Gauge> step;
  std::shared_ptr<metrics::Gauge> loss;
  std::shared_ptr<metrics::Gauge> tokens_per_second;
  std::shared_ptr<metrics::Gauge> compute_seconds;
  std::shared_ptr<metrics::Gauge> communication_seconds;
  std::shared_ptr<metrics::Gauge> input_seconds;
  struct Collective {
    std::shared_ptr<metrics::Gauge> algbw;
    std::shared_ptr<metrics::Gauge> busbw;
    std::shared_ptr<metrics::Counter> seconds;
  };
  std::map<std::pair<std::string, std::string>, Collective> collectives;  // By (op, group).
  std::shared_ptr<metrics::Gauge> mfu;
  std::shared_ptr<metrics::Gauge> state_bytes;
  // Created on the first step report that carries a gradient norm.
  std::shared_ptr<metrics::Gauge> grad_norm;
  // Created on the first step report that carries pipeline figures.
  std::shared_ptr<metrics::Gauge> stage_compute_seconds;
  std::shared_ptr<metrics::Gauge> bubble_ratio;
  std::shared_ptr<metrics::Gauge> checkpoint_step;
  std::shared_ptr<metrics::Gauge> checkpoint_seconds;
  // The phase the rank last reported (its ringmaster_worker_phase series); UNSPECIFIED before
  // the first report that names one.
  v1::WorkerPhase phase = v1::WORKER_PHASE_UNSPECIFIED;
  // Its stalled training thread's stack (ReportCollectivesRequest.stack; "" once it reported a
  // step, a phase or a collectives report without one), and the one its summaries last carried:
  // a summary carries the stack only when it changed, or after SummarizeAgain (`resend_stack`),
  // so a rank stalled for minutes does not send the same 4 KiB every second.
  std::string stack;
  std::string stack_sent;
  bool resend_stack = false;
  // ringmaster_collective_sequence by (group, kind).
  std::map<std::pair<std::string, std::string>, std::shared_ptr<metrics::Gauge>> sequences;
  // Its collectives reports, for StepSummary.working.
  WorkingRank working;
  // Wall and compute seconds of the steps since the last summary taken (for their means).
  double step_sum = 0;
  double compute_sum = 0;
  double input_sum = 0;
  int compute_steps = 0;
  // Wall seconds of the generation's last steps (at most kStepTimeWindow), for the percentiles.
  std::deque<double> recent_step_seconds;
};

RankMetrics::RankMetrics(metrics::Registry* registry, Clock* clock, absl::Duration summary_interval)
    : clock_(clock),
      summary_interval_(summary_interval),
      step_seconds_(&registry->AddHistogram("ringmaster_step_seconds",
                                            "Wall-clock seconds of each training step of the rank.",
                                            kRankLabels, StepSecondsBuckets())),
      step_(&registry->AddGauge("ringmaster_step", "Last completed training step of the rank.",
                                kRankLabels)),
      loss_(&registry->AddGauge("ringmaster_loss",
                                "Training loss of the rank's last completed step.", kRankLabels)),
      tokens_per_second_(&registry->AddGauge(
          "ringmaster_tokens_per_second",
          "Tokens the rank processed per second in its last step (tokens / step seconds).",
          kRankLabels)),
      compute_seconds_(&registry->AddGauge("ringmaster_compute_seconds",
                                           "Seconds of the rank's last step spent computing (time "
                                           "blocked in collectives on its training thread "
                                           "left out).",
                                           kRankLabels)),
      communication_seconds_(&registry->AddGauge(
          "ringmaster_communication_seconds",
          "Seconds of the rank's last step spent waiting in collectives.", kRankLabels)),
      collective_algbw_(&registry->AddGauge(
          "ringmaster_collective_algbw_bytes_per_second",
          "Algorithm bandwidth of the collective in the last step that ran it: bytes / seconds "
          "(nccl-tests' algbw).",
          kCollectiveLabels)),
      collective_busbw_(&registry->AddGauge(
          "ringmaster_collective_busbw_bytes_per_second",
          "Bus bandwidth of the collective in the last step that ran it: algbw times 2(n-1)/n for "
          "all_reduce, (n-1)/n for all_gather, reduce_scatter, gather, scatter and all_to_all, 0 "
          "for barrier, 1 otherwise (nccl-tests' busbw).",
          kCollectiveLabels)),
      collective_seconds_(&registry->AddCounter("ringmaster_collective_seconds_total",
                                                "Seconds the rank spent in the collective.",
                                                kCollectiveLabels)),
      last_report_age_(&registry->AddGauge(
          "ringmaster_last_report_age_seconds",
          "Seconds since the rank's last report of any kind, as of the agent's last refresh.",
          kRankLabels)),
      mfu_(&registry->AddGauge("ringmaster_mfu",
                               "Model FLOPs utilisation of the rank's last step (llm.c's 6N + 6LCT "
                               "FLOPs per token over the device's peak), 0 to 1.",
                               kRankLabels)),
      state_bytes_(&registry->AddGauge(
          "ringmaster_state_bytes",
          "Bytes of parameters, gradients and optimizer state the rank holds.", kRankLabels)),
      grad_norm_(&registry->AddGauge(
          "ringmaster_grad_norm",
          "Global gradient norm of the rank's last step, before clipping (a rise precedes a "
          "divergence).",
          kRankLabels)),
      input_seconds_(&registry->AddGauge(
          "ringmaster_input_seconds",
          "Seconds of the rank's last step spent waiting for its next batch (a PyTorch "
          "DataLoader's, under the Python watch): part of its compute seconds.",
          kRankLabels)),
      stage_compute_seconds_(&registry->AddGauge(
          "ringmaster_stage_compute_seconds",
          "Pipeline parallelism: seconds the rank's stage computed in its last step.",
          kRankLabels)),
      bubble_ratio_(&registry->AddGauge(
          "ringmaster_bubble_ratio",
          "Pipeline parallelism: measured idle share of the rank's last step (the formula is "
          "(p-1)/(m+p-1)).",
          kRankLabels)),
      checkpoint_step_(&registry->AddGauge("ringmaster_checkpoint_step",
                                           "Step of the newest checkpoint committed by the job.",
                                           kRankLabels)),
      checkpoint_seconds_(&registry->AddGauge(
          "ringmaster_checkpoint_seconds",
          "Seconds the newest committed checkpoint took, from snapshot to commit.", kRankLabels)),
      worker_phase_(&registry->AddGauge(
          "ringmaster_worker_phase",
          "1 for the phase the rank last reported (starting, init, step, checkpoint, eval); one "
          "series per rank.",
          {"job_id", "rank", "phase"})),
      collective_sequence_(&registry->AddGauge(
          "ringmaster_collective_sequence",
          "Sequence number of the last collective the rank entered (kind=entered) or completed "
          "(kind=completed) on the communicator; a rank whose entered number lags its group's is "
          "the one the others wait for.",
          kSequenceLabels)) {}

RankMetrics::~RankMetrics() = default;

RankMetrics::Rank* RankMetrics::Accept(const v1::WorkerIdentity& worker, bool alive) {
  auto gone = forgotten_.find(worker.job_id());
  if (gone != forgotten_.end()) {
    if (worker.generation() <= gone->second) return nullptr;
    forgotten_.erase(gone);  // a newer generation runs here
  }
  auto [it, created] = ranks_.try_emplace(RankKey(worker.job_id(), worker.rank()));
  if (created) {
    it->second = std::make_unique<Rank>();
    it->second->labels = {worker.job_id(), absl::StrCat(worker.rank())};
  }
  Rank& rank = *it->second;
  // The caller checked the generation, but a report that raced with a relaunch may still arrive
  // late; it must not overwrite the new incarnation's state.
  if (!created && worker.generation() < rank.generation) return nullptr;
  if (created || worker.generation() > rank.generation) {
    // A new incarnation restarts from a checkpoint: its steps start over and its summary starts
    // empty. Series keep their labels (and counters keep counting).
    rank.generation = worker.generation();
    rank.last_step = std::numeric_limits<int64_t>::min();
    rank.summary.Clear();
    rank.summary.mutable_job()->set_job_id(worker.job_id());
    rank.summary.mutable_job()->set_generation(worker.generation());
    rank.summary.set_rank(worker.rank());
    rank.summary.set_checkpoint_step(-1);
    rank.recent_step_seconds.clear();
    rank.working.Reset();
    rank.stack.clear();
    rank.stack_sent.clear();  // the coordinator keeps stacks per generation
    rank.resend_stack = false;
  }
  if (alive) {
    if (rank.last_report_age == nullptr) {
      rank.last_report_age = last_report_age_->WithLabels(rank.labels);
    }
    rank.last_report = clock_->Now();
    rank.last_report_age->Set(0);
  }
  return &rank;
}

void RankMetrics::OnStep(const v1::ReportStepRequest& report) {
  absl::MutexLock lock(&mu_);
  Rank* rank = Accept(report.worker(), /*alive=*/true);
  if (rank == nullptr) return;
  // Step reports are idempotent per step: a retried (or late) report is proof of life only.
  if (report.step() <= rank->last_step) return;
  rank->last_step = report.step();

  if (rank->step == nullptr) {
    rank->step_seconds = step_seconds_->WithLabels(rank->labels);
    rank->step = step_->WithLabels(rank->labels);
    rank->loss = loss_->WithLabels(rank->labels);
    rank->tokens_per_second = tokens_per_second_->WithLabels(rank->labels);
    rank->compute_seconds = compute_seconds_->WithLabels(rank->labels);
    rank->communication_seconds = communication_seconds_->WithLabels(rank->labels);
    rank->input_seconds = input_seconds_->WithLabels(rank->labels);
    rank->mfu = mfu_->WithLabels(rank->labels);
    rank->state_bytes = state_bytes_->WithLabels(rank->labels);
  }
  rank->mfu->Set(report.mfu());
  rank->state_bytes->Set(static_cast<double>(report.state_bytes()));
  if (report.has_grad_norm()) {
    if (rank->grad_norm == nullptr) rank->grad_norm = grad_norm_->WithLabels(rank->labels);
    rank->grad_norm->Set(report.grad_norm());
  }
  // Part of the compute (worker.proto): a sender's larger figure is taken as all of it.
  const double input_seconds = std::min(report.input_seconds(), report.compute_seconds());
  rank->input_seconds->Set(input_seconds);
  if (report.stage_compute_seconds() > 0) {
    if (rank->stage_compute_seconds == nullptr) {
      rank->stage_compute_seconds = stage_compute_seconds_->WithLabels(rank->labels);
      rank->bubble_ratio = bubble_ratio_->WithLabels(rank->labels);
    }
    rank->stage_compute_seconds->Set(report.stage_compute_seconds());
    rank->bubble_ratio->Set(report.bubble_fraction());
  }
  const double step_seconds = report.step_seconds();
  const double tokens_per_second =
      step_seconds > 0 ? static_cast<double>(report.tokens()) / step_seconds : 0;
  if (step_seconds > 0) rank->step_seconds->Observe(step_seconds);
  rank->step->Set(static_cast<double>(report.step()));
  rank->loss->Set(report.loss());
  rank->tokens_per_second->Set(tokens_per_second);
  rank->compute_seconds->Set(report.compute_seconds());
  rank->communication_seconds->Set(report.comm_seconds());
  for (const v1::CollectiveStat& stat : report.collectives()) {
    if (rank->collectives.size() >= kMaxCollectiveSeriesPerRank &&
        !rank->collectives.count({stat.op(), stat.group()})) {
      continue;  // A worker naming ever new groups does not grow the page without bound.
    }
    auto [it, added] = rank->collectives.try_emplace({stat.op(), stat.group()});
    Rank::Collective& series = it->second;
    if (added) {
      std::vector<std::string> labels = CollectiveLabels(rank->labels, stat.op(), stat.group());
      series.algbw = collective_algbw_->WithLabels(labels);
      series.busbw = collective_busbw_->WithLabels(labels);
      series.seconds = collective_seconds_->WithLabels(labels);
    }
    series.algbw->Set(stat.algbw_bytes_per_second());
    series.busbw->Set(stat.busbw_bytes_per_second());
    series.seconds->Increment(stat.seconds());
  }

  v1::StepSummary& s = rank->summary;
  s.set_step(report.step());
  s.set_loss(report.loss());
  s.set_step_seconds(step_seconds);
  s.set_compute_seconds(report.compute_seconds());
  s.set_comm_seconds(report.comm_seconds());
  s.set_tokens_per_second(tokens_per_second);
  *s.mutable_collective_entered() = report.collective_entered();
  *s.mutable_collective_completed() = report.collective_completed();
  SetSequences(rank, report.collective_entered(), report.collective_completed());
  s.set_phase(v1::WORKER_PHASE_STEP);  // A step report means the worker is stepping.
  s.set_unwatched(false);
  rank->stack.clear();
  SetPhase(rank, v1::WORKER_PHASE_STEP);
  s.set_step_end_unix_nanos(report.end_time_unix_nanos());
  rank->step_sum += step_seconds;
  rank->compute_sum += report.compute_seconds();
  rank->input_sum += input_seconds;
  rank->compute_steps += 1;
  s.set_mean_step_seconds(rank->step_sum / rank->compute_steps);
  s.set_mean_compute_seconds(rank->compute_sum / rank->compute_steps);
  s.set_mean_input_seconds(rank->input_sum / rank->compute_steps);
  s.set_steps_in_summary(rank->compute_steps);
  s.set_mfu(report.mfu());
  double bus_seconds = 0, bus_weighted = 0;
  for (const v1::CollectiveStat& stat : report.collectives()) {
    bus_seconds += stat.seconds();
    bus_weighted += stat.busbw_bytes_per_second() * stat.seconds();
  }
  s.set_busbw_bytes_per_second(bus_seconds > 0 ? bus_weighted / bus_seconds : 0);
  rank->recent_step_seconds.push_back(step_seconds);
  if (rank->recent_step_seconds.size() > kStepTimeWindow) rank->recent_step_seconds.pop_front();
  const std::vector<double> recent(rank->recent_step_seconds.begin(),
                                   rank->recent_step_seconds.end());
  s.set_step_seconds_p50(NearestRank(recent, 0.5));
  s.set_step_seconds_p99(NearestRank(recent, 0.99));
  if (report.process_start_unix_nanos() > 0) {  // the process's first step: its startup figures
    s.set_process_start_unix_nanos(report.process_start_unix_nanos());
    s.set_rendezvous_seconds(report.rendezvous_seconds());
    s.set_restore_seconds(report.restore_seconds());
    s.set_start_step(report.start_step());
    s.set_first_step_seconds(step_seconds);
    rank->startup_pending = true;
  }
  rank->pending = true;
}

void RankMetrics::SetSequences(Rank* rank, const google::protobuf::Map<std::string, int64_t>& entered,
                               const google::protobuf::Map<std::string, int64_t>& completed) {
  for (const auto* map : {&entered, &completed}) {
    const std::string kind = map == &entered ? "entered" : "completed";
    for (const auto& [group, sequence] : *map) {
      if (rank->sequences.size() >= 2 * kMaxCollectiveSeriesPerRank &&
          !rank->sequences.count({group, kind})) {
        continue;  // As for the collectives' series.
      }
      std::shared_ptr<metrics::Gauge>& gauge = rank->sequences[{group, kind}];
      if (gauge == nullptr) {
        gauge = collective_sequence_->WithLabels({rank->labels[0], rank->labels[1], group, kind});
      }
      gauge->Set(static_cast<double>(sequence));
    }
  }
}

void RankMetrics::OnCollectives(const v1::ReportCollectivesRequest& report) {
  absl::MutexLock lock(&mu_);
  Rank* rank = Accept(report.worker(), /*alive=*/false);
  if (rank == nullptr) return;
  v1::StepSummary& s = rank->summary;
  if (report.watch_ended()) {  // the rank says no more until a step or phase report
    s.set_unwatched(true);
    s.clear_collective_entered();
    s.clear_collective_completed();
    rank->working.Reset();
    rank->stack.clear();
    rank->pending = true;
    return;
  }
  if (s.unwatched()) return;  // one the ended watch's side thread had in flight
  if (StackOnly(report)) {  // (working_rank.h) Before numbers only: then the numbers' process.
    if (s.collective_entered().empty()) {
      rank->stack = ReportedStack(report.stack());
      rank->pending = true;
    }
    return;
  }
  rank->working.Heard(clock_->Now(), report);
  rank->stack = ReportedStack(report.stack());
  *s.mutable_collective_entered() = report.collective_entered();
  *s.mutable_collective_completed() = report.collective_completed();
  SetSequences(rank, report.collective_entered(), report.collective_completed());
  rank->pending = true;
}

void RankMetrics::OnPhase(const v1::ReportPhaseRequest& report) {
  absl::MutexLock lock(&mu_);
  Rank* rank = Accept(report.worker(), /*alive=*/true);
  if (rank == nullptr) return;
  v1::StepSummary& s = rank->summary;
  s.set_phase(report.phase());
  s.set_unwatched(false);
  rank->stack.clear();
  SetPhase(rank, report.phase());
  // Sent when leaving CHECKPOINT; 0 (unset) on every other phase report. Steps count from 1.
  if (report.checkpoint_step() > 0) {
    s.set_checkpoint_step(std::max(s.checkpoint_step(), report.checkpoint_step()));
    if (rank->checkpoint_step == nullptr) {
      rank->checkpoint_step = checkpoint_step_->WithLabels(rank->labels);
      rank->checkpoint_seconds = checkpoint_seconds_->WithLabels(rank->labels);
    }
    rank->checkpoint_step->Set(static_cast<double>(s.checkpoint_step()));
    rank->checkpoint_seconds->Set(report.checkpoint_seconds());
  }
  rank->pending = true;
}

void RankMetrics::SetPhase(Rank* rank, v1::WorkerPhase phase) {
  // Called for every step report: nothing to do unless the phase changed.
  if (phase == rank->phase || !v1::WorkerPhase_IsValid(phase) ||
      phase == v1::WORKER_PHASE_UNSPECIFIED) {
    return;
  }
  if (rank->phase != v1::WORKER_PHASE_UNSPECIFIED) {
    worker_phase_->Remove(PhaseLabels(rank->labels, rank->phase));
  }
  rank->phase = phase;
  worker_phase_->WithLabels(PhaseLabels(rank->labels, phase))->Set(1);
}

void RankMetrics::Refresh() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (auto& [key, rank] : ranks_) {
    // The agent passes the steady clock, but a wall clock stepped back must not show a negative
    // age.
    if (rank->last_report_age == nullptr) continue;  // no sign of life yet
    rank->last_report_age->Set(std::max(0.0, absl::ToDoubleSeconds(now - rank->last_report)));
  }
}

std::vector<v1::StepSummary> RankMetrics::TakeSummaries() {
  std::vector<v1::StepSummary> out;
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (auto& [key, rank] : ranks_) {
    if (!rank->pending) continue;
    if (!rank->startup_pending && now - rank->last_summary < summary_interval_) continue;
    out.push_back(Take(rank.get(), now));
  }
  return out;
}

void RankMetrics::SummarizeAgain(const std::set<std::pair<std::string, int>>& running) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, rank] : ranks_) {
    if (running.count({rank->summary.job().job_id(), rank->summary.rank()}) > 0) {
      rank->pending = true;
      rank->resend_stack = true;
    }
  }
}

void RankMetrics::StackUnsent(const std::string& job_id, int rank) {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(RankKey(job_id, rank));
  if (it != ranks_.end()) it->second->resend_stack = true;
}

std::optional<v1::StepSummary> RankMetrics::TakePendingSummary(const std::string& job_id,
                                                               int rank) {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(RankKey(job_id, rank));
  if (it == ranks_.end() || !it->second->pending) return std::nullopt;
  return Take(it->second.get(), clock_->Now());
}

v1::StepSummary RankMetrics::Take(Rank* rank, absl::Time now) {
  rank->pending = false;
  rank->startup_pending = false;
  rank->last_summary = now;
  rank->step_sum = 0;
  rank->compute_sum = 0;
  rank->input_sum = 0;
  rank->compute_steps = 0;
  v1::StepSummary taken = rank->summary;
  // As of now: a side thread that fell silent since its last report says nothing any more.
  taken.set_working(!taken.unwatched() && rank->last_step > 0 && rank->working.Working(now));
  if (rank->stack != rank->stack_sent || rank->resend_stack) {
    taken.set_stack(rank->stack);
    rank->stack_sent = rank->stack;
    rank->resend_stack = false;
  }
  // The per-summary figures start over too: a summary that a phase or collectives report makes
  // due before the next step (every second through a mid-run link check) covers no step, and
  // must not repeat the last one's mean compute as a new straggler sample.
  rank->summary.set_mean_step_seconds(0);
  rank->summary.set_mean_compute_seconds(0);
  rank->summary.set_mean_input_seconds(0);
  rank->summary.set_steps_in_summary(0);
  return taken;
}

double RankMetrics::LastReportAgeSeconds(const std::string& job_id, int rank) const {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(RankKey(job_id, rank));
  if (it == ranks_.end() || it->second->last_report_age == nullptr) return -1;
  return std::max(0.0, absl::ToDoubleSeconds(clock_->Now() - it->second->last_report));
}

void RankMetrics::RemoveSeries(const Rank& rank) {
  step_seconds_->Remove(rank.labels);
  step_->Remove(rank.labels);
  loss_->Remove(rank.labels);
  tokens_per_second_->Remove(rank.labels);
  compute_seconds_->Remove(rank.labels);
  communication_seconds_->Remove(rank.labels);
  last_report_age_->Remove(rank.labels);
  mfu_->Remove(rank.labels);
  state_bytes_->Remove(rank.labels);
  grad_norm_->Remove(rank.labels);
  input_seconds_->Remove(rank.labels);
  stage_compute_seconds_->Remove(rank.labels);
  bubble_ratio_->Remove(rank.labels);
  checkpoint_step_->Remove(rank.labels);
  checkpoint_seconds_->Remove(rank.labels);
  if (rank.phase != v1::WORKER_PHASE_UNSPECIFIED) {
    worker_phase_->Remove(PhaseLabels(rank.labels, rank.phase));
  }
  for (const auto& [group_kind, gauge] : rank.sequences) {
    collective_sequence_->Remove(
        {rank.labels[0], rank.labels[1], group_kind.first, group_kind.second});
  }
  for (const auto& [op_group, series] : rank.collectives) {
    std::vector<std::string> labels =
        CollectiveLabels(rank.labels, op_group.first, op_group.second);
    collective_algbw_->Remove(labels);
    collective_busbw_->Remove(labels);
    collective_seconds_->Remove(labels);
  }
}

void RankMetrics::ForgetJob(const std::string& job_id, int64_t generation) {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.lower_bound(RankKey(job_id, std::numeric_limits<int>::min()));
  while (it != ranks_.end() && it->first.first == job_id) {
    RemoveSeries(*it->second);
    it = ranks_.erase(it);
  }
  int64_t& forgotten = forgotten_.try_emplace(job_id, generation).first->second;
  forgotten = std::max(forgotten, generation);
  if (forgotten_.size() > kMaxForgottenJobs) {
    forgotten_.erase(forgotten_.begin()->first == job_id ? std::next(forgotten_.begin())
                                                         : forgotten_.begin());
  }
}

}  // namespace ringmaster::agent
