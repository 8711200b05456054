#include "coordinator/job_manager.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>

#include "absl/hash/hash.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_grace.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "common/one_line.h"
#include "common/proto_edge.h"
#include "common/status.h"
#include "coordinator/hang_analysis.h"
#include "coordinator/job_id.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/link_analysis.h"
#include "coordinator/node_update.h"
#include "coordinator/planner.h"
#include "coordinator/recovery_tracker.h"
#include "coordinator/spec_validation.h"
#include "coordinator/straggler_detector.h"

namespace ringmaster::coordinator {
namespace {

// How soon Tick writes a job again after its store write failed.
constexpr absl::Duration kPersistRetryInterval = absl::Seconds(1);
// How often Tick looks for ended jobs past their retention, and the most it deletes at a time.
constexpr absl::Duration kPruneInterval = absl::Minutes(1);
constexpr size_t kMaxPrunedAtOnce = 500;
// The longest wait between Tick's retries of a store that refuses writes.
constexpr absl::Duration kMaxStoreRetryPause = absl::Seconds(30);

int64_t UnixNanos(absl::Time t) { return absl::ToUnixNanos(t); }

// A process stopped when the hang began is silent by kSilentProcess (job_manager_watchdog.cc)
// after its last summary arrived, and that summary can arrive up to a forwarding interval (1 s)
// after it stopped. A hang reported sooner after it began (a short watchdog.hang_timeout) with no
// rank to blame yet waits until then for the evidence before it falls back to naming the reported
// rank.
constexpr absl::Duration kHangEvidenceWait = absl::Milliseconds(2500 + 1500);

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

std::set<std::string> NodesOf(const v1::JobStatus& status) {
  std::set<std::string> nodes;
  for (const auto& a : status.assignments()) nodes.insert(a.node());
  return nodes;
}

// A running job with ranks on `node`.
bool RunsOn(const v1::JobStatus& status, const std::string& node) {
  return status.state() == v1::JOB_STATE_RUNNING && NodesOf(status).count(node) > 0;
}

// A watch update with the job's state and generation; the caller adds the event or progress.
v1::WatchJobResponse UpdateOf(const v1::JobStatus& status) {
  v1::WatchJobResponse update;
  update.set_state(status.state());
  update.set_generation(status.generation());
  return update;
}

// `submitted` with its defaults, if it passes the rules of a spec and of paths on the cluster's
// nodes (Submit and Plan judge alike).
absl::StatusOr<v1::JobSpec> Admitted(const v1::JobSpec& submitted) {
  v1::JobSpec spec = submitted;
  ApplyDefaults(&spec);
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  RETURN_IF_ERROR(ValidateClusterPaths(spec));
  return spec;
}

// Says what decides whether a job fits in a scheduling pass (JobManager::Pass).
std::string ShapeOf(const Layout& layout, bool held_back, const std::set<std::string>& excluded) {
  return absl::StrCat(layout.nodes, "x", layout.devices_per_node, " tp", layout.tensor, " pp",
                      layout.pipeline, " dp", layout.data, held_back ? " held back" : "",
                      " avoiding ", absl::StrJoin(excluded, ","));
}

// "node-a (8 devices), node-b (8 devices)": the nodes of a placement and its devices on each;
// past the first 8 nodes, how many more.
std::string HeldNodes(const Placement& placement) {
  constexpr size_t kNamed = 8;
  std::map<std::string, int> devices;
  for (const v1::RankAssignment& a : placement.assignments) ++devices[a.node()];
  auto count_of = [](int count) {
    return absl::StrCat(count, count == 1 ? " device" : " devices");
  };
  std::vector<std::string> parts;
  int unnamed_devices = 0;
  for (const auto& [node, count] : devices) {
    if (parts.size() < kNamed) {
      parts.push_back(absl::StrCat(node, " (", count_of(count), ")"));
    } else {
      unnamed_devices += count;
    }
  }
  if (devices.size() > kNamed) {
    const size_t more = devices.size() - kNamed;
    parts.push_back(absl::StrCat("and ", more, more == 1 ? " more node (" : " more nodes (",
                                 count_of(unnamed_devices), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

// An id a caller sent (a job id, a request id), quoted, its first 64 bytes only.
std::string QuotedFromCaller(absl::string_view id) {
  constexpr size_t kShown = 64;
  return id.size() <= kShown
             ? absl::StrCat("\"", id, "\"")
             : absl::StrCat("\"", id.substr(0, kShown), "\"... (", id.size(), " bytes)");
}

// NOT_FOUND naming the job id (its first 64 bytes: the id comes from the caller).
absl::Status NoSuchJob(absl::string_view job_id) {
  return absl::NotFoundError(absl::StrCat("no job ", QuotedFromCaller(job_id)));
}

// Whether `rank` is one of the job's ranks and placed on `node`: what an agent's report about a
// rank must be to count (a report about another node's rank, or none, is malformed).
bool RankIsOn(const v1::JobStatus& status, int rank, const std::string& node) {
  return rank >= 0 && rank < status.assignments_size() && status.assignments(rank).node() == node;
}

// Names in `event` the job's ranks on `node`.
void AddRanksOn(const v1::JobStatus& status, const std::string& node, v1::JobEvent* event) {
  for (const auto& a : status.assignments()) {
    if (a.node() == node) event->add_ranks(a.rank());
  }
}

}  // namespace

namespace job_manager_internal {

Layout LayoutOf(const v1::JobStatus& status) {
  const v1::JobSpec& spec = status.spec();
  const v1::ParallelismSpec& p =
      spec.parallelism().tensor() > 0 ? spec.parallelism() : status.plan().parallelism();
  Layout layout;
  layout.nodes = spec.nodes();
  layout.devices_per_node = spec.devices_per_node();
  layout.tensor = p.tensor();
  layout.pipeline = p.pipeline();
  layout.data = p.data();
  return layout;
}

// "rank R on N was killed by signal S" or "... exited with code C", and why, as its agent tells
// it: the worker's own reason or its last output (bounded again here: an agent's text is input).
std::string DescribeExit(const std::string& node, const v1::WorkerState& state) {
  std::string what =
      absl::StrCat("rank ", state.rank(), " on ", node,
                   state.signal() != 0 ? absl::StrCat(" was killed by signal ", state.signal())
                                       : absl::StrCat(" exited with code ", state.exit_code()));
  if (const std::string why = OneLine(state.exit_reason(), kExitReasonBytes); !why.empty()) {
    absl::StrAppend(&what, ": ", why);
  }
  return what;
}

}  // namespace job_manager_internal

using job_manager_internal::DescribeExit;
using job_manager_internal::LayoutOf;

JobManager::JobManager(JobStore* store, NodeManager* nodes, RendezvousManager* rendezvous,
                       AgentCommandSink* agents, Clock* clock, metrics::Registry* registry,
                       JobManagerOptions options)
    : store_(store),
      nodes_(nodes),
      rendezvous_(rendezvous),
      agents_(agents),
      clock_(clock),
      options_(options),
      started_(clock->Now()) {
  RM_CHECK(options_.events_in_memory >= 1) << "events_in_memory must be at least 1";
  RM_CHECK(options_.max_store_replay >= 1) << "max_store_replay must be at least 1";
  if (registry != nullptr) {
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
        "checkpoint.every_steps of the running job (jobs with periodic checkpoints).",
        {"job_id"});
    job_failed_ = &registry->AddGauge(
        "ringmaster_job_failed_timestamp_seconds",
        "When the job failed for good (Unix seconds): a fatal error, or its restarts ran out. "
        "Exported for an hour after the failure.",
        {"job_id"});
  }
}

JobManager::~JobManager() = default;

void JobManager::SanitizeRecovered(Job* job) {
  // A coordinator older than the API edge's rules (common/proto_edge.h) stored what clients sent,
  // unknown fields included: a spec with unknown groups nested 99 deep is stored and loads, but
  // wrapped in a ListJobsResponse or a LaunchWorkers no client or agent can parse it. Dropped
  // here, once, with an event and a log line naming the job; the job itself goes on. (A spec too
  // large for the edge's bound is refused by the agents it is launched on, which fails the job
  // naming the rule.)
  const size_t before = job->status.ByteSizeLong();
  if (!SanitizeIncoming(&job->status)) return;
  for (v1::JobEvent& event : job->events) SanitizeIncoming(&event);
  const std::string message = absl::StrCat(
      "the stored job carried ", before - job->status.ByteSizeLong(),
      " bytes of unknown fields (accepted by an older coordinator); dropped on recovery");
  RM_LOG(WARNING) << "job " << job->status.job_id() << ": " << message;
  AddEvent(job, "sanitized", message);
  Persist(job);
}

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<StoredJob> stored, store_->LoadAll(options_.events_in_memory));
  ASSIGN_OR_RETURN(auto cordons, store_->LoadCordons());
  for (auto& [node, cordon] : cordons) nodes_->SetCordon(node, std::move(cordon));
  absl::MutexLock lock(&mu_);
  started_ = clock_->Now();
  for (StoredJob& s : stored) {
    auto job = std::make_unique<Job>();
    job->status = std::move(s.status);
    job->events = std::move(s.events);
    job->last_sequence = job->stored_sequence = s.event_count;
    const std::string id = job->status.job_id();
    SanitizeRecovered(job.get());
    if (job->status.state() == v1::JOB_STATE_RUNNING) {
      for (const auto& a : job->status.assignments()) job->awaiting[a.node()].insert(a.rank());
      int world = job->status.assignments_size();
      job->rank_step.assign(world, 0);
      job->rank_tokens_per_second.assign(world, 0);
      // The rendezvous store lives in memory: the generation's store starts empty again.
      RETURN_IF_ERROR(rendezvous_->OpenGeneration(id, job->status.generation()));
    }
    if (job->status.state() == v1::JOB_STATE_RESTARTING && !job->status.stopping_ranks().empty()) {
      // A drain's wait goes on: for the ranks' exits (their agents report them, or that they no
      // longer run, when they register again) or until its deadline.
      job->launch_not_before = absl::FromUnixNanos(job->status.stopping_deadline_unix_nanos());
    }
    if (job->status.state() == v1::JOB_STATE_RESTARTING &&
        job->status.backoff_until_unix_nanos() > 0) {
      // So does a crash loop's backoff.
      job->launch_not_before = std::max(
          job->launch_not_before, absl::FromUnixNanos(job->status.backoff_until_unix_nanos()));
    }
    order_.push_back(id);
    if (!IsTerminal(job->status.state())) StartSeries(job.get());
    if (job->status.state() == v1::JOB_STATE_FAILED) ExportFailure(job.get());
    jobs_[id] = std::move(job);
  }
  UpdateStateGauges();
  RM_LOG(INFO) << "recovered " << stored.size() << " jobs from the store";
  ScheduleLocked();
  return absl::OkStatus();
}

JobManager::Job* JobManager::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

v1::JobEvent& JobManager::AddEvent(Job* job, const std::string& kind, const std::string& message) {
  v1::JobEvent& event = job->events.emplace_back();
  event.set_sequence(++job->last_sequence);
  event.set_time_unix_nanos(UnixNanos(clock_->Now()));
  event.set_generation(job->status.generation());
  event.set_kind(kind);
  event.set_message(message);
  return event;
}

void JobManager::Persist(Job* job) {
  const auto unstored = static_cast<ptrdiff_t>(job->last_sequence - job->stored_sequence);
  std::vector<v1::JobEvent> fresh(job->events.end() - unstored, job->events.end());
  absl::Status status = store_->PutJobWithEvents(job->status, fresh);
  if (!status.ok()) {
    // The in-memory state stays authoritative; Tick writes it again in a second (a job that
    // ended has no next transition to do it).
    RM_LOG(ERROR) << "persisting job " << job->status.job_id() << ": " << status;
    if (store_errors_ != nullptr) store_errors_->Increment();
    job->unsaved = true;
    job->retry_persist_at = clock_->Now() + kPersistRetryInterval;
    return;
  }
  job->unsaved = false;
  job->stored_sequence = job->last_sequence;
  while (job->events.size() > options_.events_in_memory) job->events.pop_front();
  for (const v1::JobEvent& event : fresh) {
    v1::WatchJobResponse update = UpdateOf(job->status);
    *update.mutable_event() = event;
    for (auto& [id, callback] : job->watchers) callback(update);
  }
  if (IsTerminal(job->status.state())) {
    for (auto& [id, callback] : job->watchers) watch_jobs_.erase(id);
    job->watchers.clear();
  }
}

void JobManager::Transition(Job* job, v1::JobState state, const std::string& message) {
  job->status.set_state(state);
  v1::JobEvent& event = AddEvent(job, "state", message);
  event.set_state(state);
  if (IsTerminal(state)) job->status.set_end_time_unix_nanos(UnixNanos(clock_->Now()));
  Persist(job);
  UpdateStateGauges();
}

void JobManager::UpdateStateGauges() {
  if (jobs_by_state_ == nullptr) return;
  // Called on every state change: an array, not a map, for a coordinator that keeps many jobs.
  std::array<int, v1::JOB_STATE_CANCELLED + 1> counts{};
  for (const auto& [id, job] : jobs_) {
    const int state = job->status.state();
    if (state >= 0 && state < static_cast<int>(counts.size())) ++counts[state];
  }
  for (int s = v1::JOB_STATE_PENDING; s <= v1::JOB_STATE_CANCELLED; ++s) {
    jobs_by_state_->WithLabels({absl::AsciiStrToLower(StateName(static_cast<v1::JobState>(s)))})
        ->Set(counts[s]);
  }
}

absl::StatusOr<v1::JobStatus> JobManager::Submit(const v1::JobSpec& submitted,
                                                 const std::string& request_id,
                                                 const Caller& caller) {
  ASSIGN_OR_RETURN(const v1::JobSpec spec, Admitted(submitted));
  ASSIGN_OR_RETURN(v1::PlanExplanation plan, coordinator::Plan(spec, PlannerOptionsNow()));

  absl::MutexLock lock(&mu_);
  // The job an earlier submission with this request id created: its retry gets that job back.
  // Request ids are shared by all callers, so another caller's is refused (it would otherwise
  // take that job, and its environment, for its own).
  auto prior = [&](const std::string& existing)
                   ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<const Job*> {
    const Job* job = Find(existing);
    if (job != nullptr && job->status.owner() != caller.identity) {
      return absl::AlreadyExistsError(
          absl::StrCat("request_id: ", QuotedFromCaller(request_id),
                       " already names another caller's job; choose another request id"));
    }
    return job;
  };
  if (!request_id.empty()) {
    auto known = requests_.find(request_id);
    std::optional<std::string> existing;
    if (known != requests_.end()) {
      existing = known->second;
    } else {
      ASSIGN_OR_RETURN(existing, store_->FindRequest(request_id));
    }
    if (existing.has_value()) {
      ASSIGN_OR_RETURN(const Job* job, prior(*existing));
      if (job != nullptr) return job->status;
    }
  }
  auto job = std::make_unique<Job>();
  const std::string id = NewJobId(
      spec.name(),
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return static_cast<uint64_t>(
            absl::HashOf(spec.name(), UnixNanos(clock_->Now()), ++id_counter_));
      },
      [&](const std::string& candidate) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (jobs_.count(candidate) > 0) return true;
        // A deleted job's id too (agents remember its generations). If the store cannot say,
        // CreateJob below fails the same way.
        absl::StatusOr<bool> used = store_->JobIdUsed(candidate);
        return used.ok() && *used;
      });
  v1::JobStatus& status = job->status;
  status.set_job_id(id);
  *status.mutable_spec() = spec;
  *status.mutable_plan() = plan;
  status.set_owner(caller.identity);
  status.set_submit_time_unix_nanos(UnixNanos(clock_->Now()));
  status.set_state(v1::JOB_STATE_PENDING);
  status.set_reason("waiting to be placed");
  v1::JobEvent& event =
      AddEvent(job.get(), "state",
               absl::StrCat("submitted", caller.identity.empty() ? "" : " by " + caller.identity));
  event.set_state(v1::JOB_STATE_PENDING);
  absl::Status created = store_->CreateJob(
      status, std::vector<v1::JobEvent>(job->events.begin(), job->events.end()), request_id);
  if (absl::IsAlreadyExists(created)) {
    ASSIGN_OR_RETURN(std::optional<std::string> existing, store_->FindRequest(request_id));
    if (existing.has_value()) {
      ASSIGN_OR_RETURN(const Job* job, prior(*existing));
      if (job != nullptr) return job->status;
    }
  }
  RETURN_IF_ERROR(created);
  job->stored_sequence = job->last_sequence;
  if (!request_id.empty()) requests_[request_id] = id;
  Job* raw = job.get();
  jobs_[id] = std::move(job);
  order_.push_back(id);
  StartSeries(raw);
  if (submitted_) submitted_->Increment();
  UpdateStateGauges();
  ScheduleLocked();
  return raw->status;
}

absl::StatusOr<v1::PlanJobResponse> JobManager::Plan(const v1::JobSpec& submitted) {
  ASSIGN_OR_RETURN(const v1::JobSpec spec, Admitted(submitted));
  v1::PlanJobResponse response;
  ASSIGN_OR_RETURN(*response.mutable_plan(), coordinator::Plan(spec, PlannerOptionsNow()));
  v1::JobStatus probe;
  *probe.mutable_spec() = spec;
  *probe.mutable_plan() = response.plan();
  const Layout layout = LayoutOf(probe);
  const std::vector<NodeCapacity> free = nodes_->FreeCapacity();
  Hold hold;
  {
    absl::MutexLock lock(&mu_);
    hold = hold_;
  }
  // Placed as a new job would be: behind the devices held for the first waiting one.
  absl::StatusOr<Placement> placement =
      PlaceBehind(free, hold.job_id.empty() ? nullptr : &hold, layout, {});
  if (placement.ok()) {
    for (auto& a : placement->assignments) *response.add_assignments() = a;
    *response.mutable_groups() = placement->groups;
  } else {
    response.set_pending_reason(std::string(placement.status().message()));
  }
  return response;
}

PlannerOptions JobManager::PlannerOptionsNow() const {
  PlannerOptions planner;
  planner.device_memory_bytes = options_.device_memory_bytes;
  if (planner.device_memory_bytes <= 0) {
    planner.device_memory_bytes = nodes_->SmallestGpuMemory();
    planner.device_memory_source = "the smallest GPU of the registered nodes";
  }
  return planner;
}

absl::StatusOr<v1::GetJobResponse> JobManager::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr) return NoSuchJob(job_id);
  v1::GetJobResponse response;
  *response.mutable_job() = job->status;
  const size_t shown = std::min(job->events.size(), options_.events_in_memory);
  for (auto e = job->events.end() - static_cast<ptrdiff_t>(shown); e != job->events.end(); ++e) {
    *response.add_events() = *e;
  }
  response.set_events_omitted(job->last_sequence - static_cast<int64_t>(shown));
  if (job->status.state() == v1::JOB_STATE_RUNNING) {
    const absl::Time now = clock_->Now();
    for (int rank = 0; rank < static_cast<int>(job->rank_step.size()); ++rank) {
      v1::RankLiveState* live = response.add_ranks();
      live->set_rank(rank);
      live->set_step(job->rank_step[rank]);
      auto heard = job->last_heard.find(rank);
      live->set_last_report_age_seconds(
          heard == job->last_heard.end() ? -1 : absl::ToDoubleSeconds(now - heard->second));
      if (job->stragglers != nullptr) {
        live->set_compute_ratio(job->stragglers->ratio(rank));
        live->set_straggler(job->stragglers->flagged(rank));
      }
      live->set_hang_suspect(job->hang_suspects.count(rank) > 0);
      live->set_finished(job->finished_ranks.count(rank) > 0);
    }
  }
  if (job->link_check != nullptr) *response.mutable_link_check() = job->link_check->Summarize();
  return response;
}

absl::StatusOr<JobManager::JobPage> JobManager::List(const std::vector<v1::JobState>& states,
                                                     int limit,
                                                     const std::string& page_token) const {
  if (limit < 0) return FieldError("limit", absl::StrCat("must be >= 0 (0: 100), got ", limit));
  if (limit == 0) limit = kDefaultListLimit;
  limit = std::min(limit, kMaxListLimit);
  absl::MutexLock lock(&mu_);
  auto it = order_.rbegin();
  if (!page_token.empty()) {
    // The token names the last job the previous page listed, and when it was submitted: this
    // page starts with the job submitted before it, or, if it was deleted since, with the first
    // one submitted earlier than it.
    const std::pair<absl::string_view, absl::string_view> parts =
        absl::StrSplit(page_token, absl::MaxSplits('/', 1));
    int64_t submitted = 0;
    if (parts.second.empty() || !absl::SimpleAtoi(parts.first, &submitted)) {
      return FieldError("page_token", absl::StrCat(QuotedFromCaller(page_token),
                                                   " is not a next_page_token ListJobs gave"));
    }
    it = std::find(order_.rbegin(), order_.rend(), parts.second);
    if (it != order_.rend()) {
      ++it;
    } else {
      it = std::find_if(order_.rbegin(), order_.rend(), [&](const std::string& id) {
        return Find(id)->status.submit_time_unix_nanos() < submitted;
      });
    }
  }
  JobPage page;
  for (; it != order_.rend(); ++it) {
    const Job* job = Find(*it);
    if (!states.empty() &&
        std::find(states.begin(), states.end(), job->status.state()) == states.end()) {
      continue;
    }
    if (static_cast<int>(page.jobs.size()) == limit) {  // an older job matches: another page
      page.next_page_token =
          absl::StrCat(page.jobs.back().submit_time_unix_nanos(), "/", page.jobs.back().job_id());
      break;
    }
    page.jobs.push_back(job->status);
  }
  return page;
}

absl::StatusOr<JobManager::Job*> JobManager::FindForCaller(const std::string& job_id,
                                                           const Caller& caller,
                                                           const std::string& action) const {
  Job* job = Find(job_id);
  if (job == nullptr) return NoSuchJob(job_id);
  RETURN_IF_ERROR(CheckOwnerOrAdmin(caller, job_id, job->status.owner(), action));
  return job;
}

absl::StatusOr<v1::JobStatus> JobManager::Cancel(const std::string& job_id,
                                                 const std::string& reason, const Caller& caller) {
  if (reason.size() > kMaxCancelReasonBytes) {
    // It is stored in an event for the job's lifetime.
    return FieldError("reason", absl::StrCat("must be at most ", kMaxCancelReasonBytes,
                                             " bytes, got ", reason.size()));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, FindForCaller(job_id, caller, "cancel it"));
  if (IsTerminal(job->status.state())) return job->status;
  Finish(job, v1::JOB_STATE_CANCELLED,
         absl::StrCat("cancelled", caller.identity.empty() ? "" : " by " + caller.identity,
                      reason.empty() ? "" : ": " + reason));
  ScheduleLocked();  // Its devices may let a pending job run.
  return job->status;
}

absl::StatusOr<uint64_t> JobManager::Watch(const std::string& job_id, int64_t after_sequence,
                                           WatchCallback callback) {
  if (after_sequence < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("after_sequence: must be >= 0, got ", after_sequence));
  }
  // The part of the log older than memory holds is read from the store (only stored events leave
  // memory) without the lock, at most options_.max_store_replay events per watch; memory may
  // drop more events meanwhile, so read until the reads meet it.
  std::vector<v1::JobEvent> older;
  int64_t replayed = after_sequence;  // the newest event read (or not asked for)
  for (;;) {
    int64_t read_up_to = 0;
    {
      absl::MutexLock lock(&mu_);
      Job* job = Find(job_id);
      if (job == nullptr) return NoSuchJob(job_id);
      const int64_t first_in_memory =
          job->events.empty() ? job->last_sequence + 1 : job->events.front().sequence();
      const size_t room =
          options_.max_store_replay - std::min(options_.max_store_replay, older.size());
      if (replayed >= first_in_memory - 1 || room == 0) {
        return WatchLocked(job, after_sequence, replayed, older, replayed < first_in_memory - 1,
                           std::move(callback));
      }
      read_up_to = std::min(first_in_memory - 1, replayed + static_cast<int64_t>(room));
    }
    absl::StatusOr<std::vector<v1::JobEvent>> read =
        store_->ReadEvents(job_id, replayed, read_up_to);
    if (!read.ok()) {
      absl::MutexLock lock(&mu_);
      if (Find(job_id) == nullptr) return NoSuchJob(job_id);  // deleted meanwhile
      return read.status();
    }
    older.insert(older.end(), std::make_move_iterator(read->begin()),
                 std::make_move_iterator(read->end()));
    replayed = read_up_to;
  }
}

absl::StatusOr<uint64_t> JobManager::WatchLocked(Job* job, int64_t after_sequence, int64_t replayed,
                                                 const std::vector<v1::JobEvent>& older,
                                                 bool more_in_store, WatchCallback callback) {
  auto replay = [&](const v1::JobEvent& event) {
    v1::WatchJobResponse update = UpdateOf(job->status);
    *update.mutable_event() = event;
    callback(update);
  };
  for (const v1::JobEvent& event : older) replay(event);
  if (more_in_store) {
    return absl::ResourceExhaustedError(
        absl::StrCat("replayed events ", after_sequence + 1, " to ", replayed, " of ",
                     job->last_sequence, " from the store, at most ", options_.max_store_replay,
                     " a watch: watch again with after_sequence ", replayed, " for the rest"));
  }
  for (const v1::JobEvent& event : job->events) {
    if (event.sequence() > replayed && event.sequence() <= job->stored_sequence) replay(event);
  }
  uint64_t id = next_watch_++;
  if (!IsTerminal(job->status.state())) {
    if (job->status.state() == v1::JOB_STATE_RUNNING) {
      v1::WatchJobResponse update = UpdateOf(job->status);
      *update.mutable_progress() = job->status.progress();
      callback(update);
    }
    job->watchers[id] = std::move(callback);
    watch_jobs_[id] = job->status.job_id();
  }
  return id;
}

void JobManager::Unwatch(uint64_t watch_id) {
  absl::MutexLock lock(&mu_);
  auto it = watch_jobs_.find(watch_id);
  if (it == watch_jobs_.end()) return;
  if (Job* job = Find(it->second)) job->watchers.erase(watch_id);
  watch_jobs_.erase(it);
}

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
      if (nodes_->IsAlive(a.node()) && !job->finished_ranks.count(a.rank())) {
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
  if (static_cast<int>(job->finished_ranks.size()) == world) {
    Finish(job, v1::JOB_STATE_SUCCEEDED, absl::StrCat("all ", world, " ranks finished"));
  } else {
    Persist(job);
  }
}

void JobManager::Relaunch(Job* job, const std::string& why, absl::Time failed_at,
                          absl::Time not_before, const std::string& reason,
                          const std::string& message, double checkpoint_grace_seconds) {
  StopWorkers(job, why, checkpoint_grace_seconds);
  nodes_->Release(job->status.job_id());
  job->recovery.OnFailure(failed_at, clock_->Now());
  job->launch_not_before = not_before;
  job->status.set_reason(reason);
  Transition(job, v1::JOB_STATE_RESTARTING, message);
}

void JobManager::Schedule() {
  absl::MutexLock lock(&mu_);
  ScheduleLocked();
}

void JobManager::ScheduleLocked() {
  const absl::Time start = absl::Now();  // real time, whatever clock_ is
  // Running jobs between generations first, then the pending ones; each in submission order.
  // (Placing one job changes no other's state.)
  std::vector<Job*> restarting, pending;
  const absl::Time now = clock_->Now();
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (job->status.state() == v1::JOB_STATE_RESTARTING && now >= job->launch_not_before) {
      restarting.push_back(job);
    } else if (job->status.state() == v1::JOB_STATE_PENDING) {
      pending.push_back(job);
    }
  }
  Pass pass;
  auto try_place = [&](Job* job) {
    const int refused = pass.refused;
    // Refused: a node was lost or left since the free devices were read; try once more on
    // devices read again (no later pass may come soon).
    if (!TryPlace(job, &pass) && pass.refused > refused) TryPlace(job, &pass);
  };
  for (Job* job : restarting) try_place(job);
  for (Job* job : pending) try_place(job);
  ExportHold(pass.hold);
  hold_ = std::move(pass.hold);
  if (scheduling_pass_seconds_ != nullptr) {
    scheduling_pass_seconds_->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  }
}

void JobManager::ExportHold(const Hold& hold) {
  if (held_devices_ == nullptr) return;
  if (!hold_.job_id.empty() && hold_.job_id != hold.job_id) {
    held_devices_->Remove({hold_.job_id, "idle"});
    held_devices_->Remove({hold_.job_id, "busy"});
  }
  if (hold.job_id.empty()) return;
  std::set<std::pair<std::string, int>> free;
  // Read again, not the pass's: a node may have been lost during the pass.
  for (const NodeCapacity& node : nodes_->FreeCapacity()) {
    for (const FreeDevice& d : node.free) free.emplace(node.name, d.index);
  }
  int idle = 0;
  for (const v1::RankAssignment& a : hold.placement.assignments) {
    idle += free.count({a.node(), a.local_device()}) > 0 ? 1 : 0;
  }
  const int held = static_cast<int>(hold.placement.assignments.size());
  held_devices_->WithLabels({hold.job_id, "idle"})->Set(idle);
  held_devices_->WithLabels({hold.job_id, "busy"})->Set(held - idle);
}

absl::Duration JobManager::RestartBackoff(Job* job) {
  const int failures =
      job->status.generation_stepped() ? 0 : job->status.failures_before_a_step() + 1;
  job->status.set_failures_before_a_step(failures);
  if (failures < 2 || options_.restart_backoff <= absl::ZeroDuration()) {
    return absl::ZeroDuration();
  }
  absl::Duration wait = options_.restart_backoff;
  for (int i = 2; i < failures && wait < options_.restart_backoff_max; ++i) {
    wait *= 2;
  }
  return std::min(wait, options_.restart_backoff_max);
}

absl::StatusOr<Placement> JobManager::PlaceBehind(const std::vector<NodeCapacity>& free,
                                                  const Hold* hold, const Layout& layout,
                                                  const std::set<std::string>& excluded) {
  std::vector<NodeCapacity> not_held;  // copied only when something is held
  if (hold != nullptr) not_held = WithoutDevicesOf(free, hold->placement);
  const std::vector<NodeCapacity>& open = hold == nullptr ? free : not_held;
  absl::StatusOr<Placement> placement = Place(open, layout, excluded);
  if (!placement.ok() && !excluded.empty() && absl::IsResourceExhausted(placement.status())) {
    // No spare capacity without the excluded nodes: use them after all.
    placement = Place(open, layout, {});
  }
  if (placement.ok() || hold == nullptr || !absl::IsResourceExhausted(placement.status())) {
    return placement;
  }
  // Say what is free, not what is left once the held devices are taken out.
  absl::StatusOr<Placement> unheld = Place(free, layout, {});
  return absl::ResourceExhaustedError(
      unheld.ok() ? absl::StrCat("waiting behind job ", hold->job_id,
                                 ": it would fit only on devices held for that job, on ",
                                 HeldNodes(hold->placement))
                  : absl::StrCat(unheld.status().message(), "; devices are also held for job ",
                                 hold->job_id, " on ", HeldNodes(hold->placement)));
}

bool JobManager::TryPlace(Job* job, Pass* pass) {
  // Ranks of a drain that have not exited by now were SIGKILLed: their devices are free.
  if (!job->status.stopping_ranks().empty()) {
    nodes_->Release(job->status.job_id());
    pass->Forget();
  }
  Hold* hold = &pass->hold;
  const Layout layout = LayoutOf(job->status);
  if (!pass->free.has_value()) pass->free = nodes_->FreeCapacity();
  const std::vector<NodeCapacity>& free = *pass->free;
  // A RESTARTING job is running, between generations: it takes any free device.
  const bool held_back = !hold->job_id.empty() && job->status.state() == v1::JOB_STATE_PENDING;
  const std::string shape = ShapeOf(layout, held_back, job->excluded);
  auto misfit = pass->misfits.find(shape);
  const bool judged = misfit != pass->misfits.end();
  absl::StatusOr<Placement> placement =
      judged ? absl::StatusOr<Placement>(misfit->second)
             : PlaceBehind(free, held_back ? hold : nullptr, layout, job->excluded);
  if (!judged && absl::IsResourceExhausted(placement.status())) {
    pass->misfits.emplace(shape, placement.status());
  }
  if (!placement.ok()) {
    if (absl::IsResourceExhausted(placement.status())) {
      std::string reason(placement.status().message());
      if (hold->job_id.empty() && options_.hold_devices_for_oldest_pending &&
          pass->never_fit.count(shape) == 0) {
        // The first job that does not fit holds the devices nearest to being free that it
        // would run on (off the nodes it avoids, if it can). A job that would not fit even on
        // every usable device waits for nodes to join, holding nothing.
        const std::vector<NodeCapacity> usable = nodes_->UsableCapacity();
        absl::StatusOr<Placement> once_free = PlaceOnceFree(usable, free, layout, job->excluded);
        if (!once_free.ok() && !job->excluded.empty()) {
          once_free = PlaceOnceFree(usable, free, layout, {});
        }
        if (once_free.ok()) {
          hold->job_id = job->status.job_id();
          hold->placement = *std::move(once_free);
          absl::StrAppend(&reason, "; devices are held for it as they free up on ",
                          HeldNodes(hold->placement));
        } else {
          pass->never_fit.insert(shape);
        }
      }
      if (!pass->cordoned.has_value()) pass->cordoned = nodes_->Cordoned();
      if (!pass->cordoned->empty()) {
        absl::StrAppend(&reason, "; cordoned: ", absl::StrJoin(*pass->cordoned, ", "));
      }
      if (reason != job->status.reason()) {
        job->status.set_reason(reason);
        Persist(job);
      }
      return false;
    }
    Fail(job, absl::StrCat("cannot be placed: ", placement.status().message()), /*fatal=*/true,
         clock_->Now(), "");
    pass->Forget();  // it may have had devices
    return false;
  }
  const std::string& id = job->status.job_id();
  if (!nodes_->Allocate(id, *placement).ok()) {  // A node was lost or left meanwhile.
    pass->Forget();
    ++pass->refused;
    return false;
  }
  TakeDevices(*placement, &*pass->free);
  pass->misfits.clear();
  pass->never_fit.clear();
  v1::JobStatus& status = job->status;
  status.set_generation(status.generation() + 1);
  status.clear_assignments();
  for (const auto& a : placement->assignments) *status.add_assignments() = a;
  *status.mutable_groups() = placement->groups;
  status.set_reason("");
  // The newest committed checkpoint, where this generation should resume: as reported since this
  // coordinator started, or as stored with the previous generation's progress.
  job->checkpoint_at_launch =
      std::max(job->newest_checkpoint_step, status.progress().checkpoint_step());
  // What the previous generation trained, if it stepped (else its predecessor's stands): a
  // resume from an earlier step loses the difference (StepsLost).
  if (status.generation_stepped()) {
    job->at_launch.trained = std::max(job->furthest_step, status.progress().step());
  }
  job->at_launch.failures = job->checkpoint_failures;
  job->at_launch.last_failed = job->last_failed_checkpoint;
  job->at_launch.last_error = job->last_checkpoint_error;
  job->furthest_step = 0;
  job->generation_start_step = 0;
  job->steps_lost.clear();
  job->failed_checkpoint_step = 0;
  status.clear_progress();
  status.mutable_progress()->set_checkpoint_step(-1);
  const int world = static_cast<int>(placement->assignments.size());
  job->finished_ranks.clear();
  job->awaiting.clear();          // a new generation has nothing to reconcile
  job->link_check.reset();        // nor a link check yet
  job->start_link_check_seconds.clear();
  status.clear_stopping_ranks();  // waited for long enough (Tick) or all gone
  status.set_stopping_deadline_unix_nanos(0);
  status.set_backoff_until_unix_nanos(0);
  status.set_generation_stepped(false);
  job->rank_step.assign(world, 0);
  job->rank_tokens_per_second.assign(world, 0);
  job->collectives.clear();
  job->last_heard.clear();
  job->heard_from = absl::InfinitePast();
  job->pending_hang.reset();
  StragglerOptions straggler_options;
  straggler_options.threshold = status.spec().watchdog().straggler_threshold();
  job->stragglers = std::make_unique<StragglerDetector>(straggler_options);
  job->resumed = false;
  job->recovery.OnLaunch(world, clock_->Now());
  absl::Status opened = rendezvous_->OpenGeneration(id, status.generation());
  if (!opened.ok()) RM_LOG(ERROR) << "rendezvous for " << id << ": " << opened;

  // MASTER_PORT: one port per (job, generation) from a fixed range, so every agent agrees on it
  // without another round trip.
  const int master_port =
      options_.master_port_base + static_cast<int>(absl::HashOf(id, status.generation()) % 1000);
  const std::string master_addr =
      nodes_->HostAddress(placement->assignments[0].node()).value_or("127.0.0.1");
  std::map<std::string, v1::CoordinatorMessage> launches;
  for (const auto& a : placement->assignments) {
    v1::LaunchWorkers* launch = launches[a.node()].mutable_launch();
    *launch->add_assignments() = a;
  }
  for (auto& [node, message] : launches) {
    v1::LaunchWorkers* launch = message.mutable_launch();
    launch->mutable_job()->set_job_id(id);
    launch->mutable_job()->set_generation(status.generation());
    *launch->mutable_spec() = status.spec();
    const Layout layout = LayoutOf(status);
    launch->mutable_layout()->set_tensor(layout.tensor);
    launch->mutable_layout()->set_pipeline(layout.pipeline);
    launch->mutable_layout()->set_data(layout.data);
    launch->set_world_size(world);
    launch->set_master_addr(master_addr);
    launch->set_master_port(master_port);
    launch->set_restart_count(status.restarts());
  }
  // Stored before any agent hears of it: a coordinator that dies in between comes back knowing
  // the generation whose workers the agents may already run, and adopts them.
  Transition(job, v1::JOB_STATE_RUNNING,
             absl::StrCat("placed ", world, " ranks on ", launches.size(), " nodes (generation ",
                          status.generation(), ")"));
  for (const auto& [node, message] : launches) {
    if (!agents_->Send(node, message)) {
      RM_LOG(WARNING) << "no stream to " << node << " for launching " << id;
    }
  }
  return true;
}

void JobManager::StopWorkers(Job* job, const std::string& reason, double checkpoint_grace_seconds) {
  for (const std::string& node : NodesOf(job->status)) {
    v1::CoordinatorMessage message;
    v1::StopWorkers* stop = message.mutable_stop();
    stop->mutable_job()->set_job_id(job->status.job_id());
    stop->mutable_job()->set_generation(job->status.generation());
    stop->set_grace_seconds(options_.stop_grace_seconds);
    stop->set_checkpoint_grace_seconds(checkpoint_grace_seconds);
    stop->set_reason(reason);
    agents_->Send(node, message);
  }
}

void JobManager::Finish(Job* job, v1::JobState state, const std::string& message) {
  if (job->status.state() == v1::JOB_STATE_RUNNING) StopWorkers(job, message);
  ForgetSeries(job);
  nodes_->Release(job->status.job_id());
  // A drain's ranks still checkpointing keep their devices until they exit, or until the wait's
  // deadline (Tick): the job ends, its workers do not end with it.
  for (int rank : job->status.stopping_ranks()) HoldStoppingDevice(job, rank);
  rendezvous_->CloseJob(job->status.job_id());
  job->status.set_reason("");
  job->status.set_backoff_until_unix_nanos(0);
  Transition(job, state, message);
  if (state == v1::JOB_STATE_FAILED) ExportFailure(job);
}

void JobManager::ExportFailure(Job* job) {
  if (job_failed_ == nullptr) return;
  const absl::Time failed = absl::FromUnixNanos(job->status.end_time_unix_nanos());
  const absl::Time until = failed + options_.failed_series_retention;
  if (clock_->Now() >= until) return;
  job->failed_series_until = until;
  job_failed_->WithLabels({job->status.job_id()})
      ->Set(absl::ToDoubleSeconds(failed - absl::UnixEpoch()));
}

namespace {

// The restarts that count against restart.max_restarts at `now`: with a window, those inside it
// (older ones are dropped from the job's list); without, all of the job's.
int CountedRestarts(v1::JobStatus* status, absl::Time now) {
  const int window = status->spec().restart().window_minutes();
  if (window <= 0) return status->restarts();
  const int64_t since = UnixNanos(now - absl::Minutes(window));
  auto* times = status->mutable_counted_restart_unix_nanos();
  times->erase(times->begin(), std::find_if(times->begin(), times->end(),
                                            [since](int64_t t) { return t >= since; }));
  return times->size();
}

}  // namespace

void JobManager::Fail(Job* job, const std::string& why, bool fatal, absl::Time failed_at,
                      const std::string& node) {
  const v1::JobStatus& status = job->status;
  if (!node.empty()) {
    job->failure_streak = node == job->last_failed_node ? job->failure_streak + 1 : 1;
    job->last_failed_node = node;
    if (job->failure_streak >= 2 && job->excluded.insert(node).second) {
      AddEvent(job, "exclude",
               absl::StrCat("node ", node, " was part of ", job->failure_streak,
                            " failures in a row: placing the job elsewhere while capacity "
                            "allows"));
    }
  }
  const absl::Time now = clock_->Now();
  const int counted = CountedRestarts(&job->status, now);
  const int allowed = status.spec().restart().max_restarts();
  const int window = status.spec().restart().window_minutes();
  const std::string within = window > 0 ? absl::StrCat(" within ", window, " minutes") : "";
  if (fatal || counted >= allowed) {
    Finish(job, v1::JOB_STATE_FAILED,
           fatal
               ? absl::StrCat(why, " (fatal: no restart)")
               : absl::StrCat(why, " (", counted, " of ", allowed, " restarts used", within, ")"));
    return;
  }
  job->status.set_restarts(status.restarts() + 1);
  if (window > 0) job->status.add_counted_restart_unix_nanos(UnixNanos(now));
  if (restarts_ != nullptr) restarts_->WithLabels({status.job_id()})->Increment();
  std::string message = absl::StrCat(why, "; restart ", counted + 1, " of ", allowed, within);
  if (window > 0) absl::StrAppend(&message, " (", status.restarts(), " in all)");
  const absl::Duration wait = RestartBackoff(job);
  absl::Time not_before = absl::InfinitePast();
  std::string reason = why;
  if (wait > absl::ZeroDuration()) {
    not_before = clock_->Now() + wait;
    job->status.set_backoff_until_unix_nanos(UnixNanos(not_before));  // stored by Relaunch
    const std::string backoff = absl::StrCat(
        " in ", absl::FormatDuration(wait), " (crash loop: ", status.failures_before_a_step(),
        " generations in a row failed before their first step)");
    absl::StrAppend(&message, backoff);
    absl::StrAppend(&reason, "; next launch", backoff);
  }
  Relaunch(job, why, failed_at, not_before, reason, message);
}

void JobManager::OnWorkerState(const std::string& node, const v1::WorkerState& state) {
  absl::MutexLock lock(&mu_);
  OnWorkerStateLocked(node, state);
}

void JobManager::OnWorkerStateLocked(const std::string& node, const v1::WorkerState& state) {
  Job* job = Find(state.job().job_id());
  if (job != nullptr) QuoteSuspectExit(job, node, state);
  if (job != nullptr && !job->status.stopping_ranks().empty() &&
      state.phase() == v1::WORKER_PHASE_EXITED &&
      state.job().generation() == job->status.generation()) {
    // A drained generation's rank, after its checkpoint; or done: the drain came at the end.
    // (Its job is RESTARTING, or ended during the wait.)
    if (!RankIsOn(job->status, state.rank(), node)) return;
    if (state.exit_code() == 0 && state.signal() == 0) job->finished_ranks.insert(state.rank());
    OnStoppingRankGone(job, state.rank());
    ScheduleLocked();
    return;
  }
  if (job == nullptr || job->status.state() != v1::JOB_STATE_RUNNING ||
      state.job().generation() != job->status.generation()) {
    return;  // Unknown, finished, or a stale generation: fenced.
  }
  const int world = job->status.assignments_size();
  if (!RankIsOn(job->status, state.rank(), node)) return;
  // How far the rank got, as its agent last heard (a summary may not have said it yet).
  job->furthest_step = std::max(job->furthest_step, state.step());
  if (state.phase() != v1::WORKER_PHASE_EXITED) {
    if (state.last_report_age_seconds() <= 0) return;  // A phase change, not a hang report.
    // The agent's watchdog saw no report from the rank beyond its phase's allowance.
    if (job->pending_hang.has_value()) return;  // The first report is being decided.
    const absl::Time began = clock_->Now() - absl::Seconds(state.last_report_age_seconds());
    const absl::Time decide_by = std::max(began, job->heard_from) + kHangEvidenceWait;
    std::string why;
    if (HangEvidence(*job, &why).empty() && clock_->Now() < decide_by) {
      job->pending_hang = Job::PendingHang{node, state, began, decide_by};
      return;  // Tick() decides once the evidence is in, or the wait is over.
    }
    DeclareHang(job, node, state, began);
    ScheduleLocked();
    return;
  }
  if (state.exit_code() == 0 && state.signal() == 0) {
    job->finished_ranks.insert(state.rank());
    if (static_cast<int>(job->finished_ranks.size()) == world) {
      Finish(job, v1::JOB_STATE_SUCCEEDED, absl::StrCat("all ", world, " ranks finished"));
      ScheduleLocked();
    }
    return;
  }
  const std::string what = DescribeExit(node, state);
  v1::JobEvent& event = AddEvent(job, "worker_exit", what);
  event.add_ranks(state.rank());
  const absl::Time failed_at =
      state.time_unix_nanos() > 0 ? absl::FromUnixNanos(state.time_unix_nanos()) : clock_->Now();
  Fail(job, what, /*fatal=*/state.signal() == 0 && state.exit_code() == kExitFatal, failed_at,
       node);
  ScheduleLocked();
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
    if (!RunsOn(job->status, node)) continue;
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
  return session;
}

void JobManager::ReconcileNodeLocked(const v1::Register& registration) {
  const std::string& node = registration.node();
  // (job, rank) of the jobs' current generations that run here or whose exit the node reported.
  std::set<std::pair<std::string, int>> accounted;
  auto account = [&](Job* job, int rank) {
    accounted.insert({job->status.job_id(), rank});
    auto awaited = job->awaiting.find(node);
    if (awaited == job->awaiting.end()) return;
    awaited->second.erase(rank);
    if (awaited->second.empty()) job->awaiting.erase(awaited);
  };
  for (const v1::WorkerState& worker : registration.running_workers()) {
    Job* job = Find(worker.job().job_id());
    const bool current = job != nullptr && worker.job().generation() == job->status.generation() &&
                         RankIsOn(job->status, worker.rank(), node);
    if (current) account(job, worker.rank());
    if (current && job->status.state() == v1::JOB_STATE_RUNNING) {
      // Heard of through its agent: from now on its silence counts (hang evidence).
      job->last_heard.emplace(worker.rank(), clock_->Now());
      job->heard_from = clock_->Now();
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
          !job->finished_ranks.count(a.rank())) {
        gone.push_back(a.rank());
      }
    }
    if (gone.empty()) continue;
    job->awaiting.erase(node);
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
    if (store_errors_ != nullptr) store_errors_->Increment();
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
    if (job_failed_ != nullptr && Find(id)->failed_series_until != absl::InfinitePast()) {
      job_failed_->Remove({id});
    }
    jobs_.erase(id);
  }
  RM_LOG(INFO) << "deleted " << gone.size() << " job(s) that ended more than "
               << absl::FormatDuration(options_.ended_job_retention) << " ago";
  UpdateStateGauges();
}

void JobManager::Tick() {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  PruneEndedJobsLocked(now);
  bool changed = false;  // something to place: a crash-loop wait ended, or a job failed
  // A store that refuses a retry is left alone for a while, doubling up to 30 s: a locked
  // database makes each write wait out its busy timeout, under this lock.
  bool store_refused = now < store_retry_at_;
  for (const std::string& id : order_) {
    Job* job = Find(id);
    if (job->unsaved && !store_refused && now >= job->retry_persist_at) {
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
    if (job->failed_series_until != absl::InfinitePast() && now >= job->failed_series_until) {
      job_failed_->Remove({id});
      job->failed_series_until = absl::InfinitePast();
    }
    if (job->status.state() == v1::JOB_STATE_RESTARTING &&
        job->launch_not_before != absl::InfinitePast() && now >= job->launch_not_before) {
      job->launch_not_before = absl::InfinitePast();
      if (job->status.backoff_until_unix_nanos() > 0) {
        // The wait is over (the launch may still wait for capacity): no "next launch at" past.
        job->status.set_backoff_until_unix_nanos(0);
        Persist(job);
      }
      changed = true;
    }
    if (!job->hang_suspects.empty() && now >= job->hang_suspects_until) ClearHangSuspects(job);
    if (IsTerminal(job->status.state()) && !job->status.stopping_ranks().empty() &&
        now >= absl::FromUnixNanos(job->status.stopping_deadline_unix_nanos())) {
      // A job that ended during a drain's wait: its ranks that did not exit by the deadline
      // were SIGKILLed, and their devices are free.
      nodes_->Release(id);
      job->status.clear_stopping_ranks();
      job->status.set_stopping_deadline_unix_nanos(0);
      Persist(job);
      changed = true;
      continue;
    }
    if (job->status.state() != v1::JOB_STATE_RUNNING) continue;
    if (job->pending_hang.has_value()) {
      std::string unused;
      if (now >= job->pending_hang->decide_by ||
          !HangEvidence(*job, &unused).empty()) {
        const Job::PendingHang pending = *job->pending_hang;
        DeclareHang(job, pending.node, pending.state, pending.began);
        changed = true;
        continue;
      }
    }
    if (!job->awaiting.empty() && now - started_ >= options_.reconcile_timeout) {
      // A rank neither running nor reported as exited by its node: it is lost.
      const auto& [missing, ranks] = *job->awaiting.begin();
      std::string what =
          absl::StrCat("node ", missing, " did not report rank(s) ", absl::StrJoin(ranks, ", "),
                       " of the job after a coordinator restart");
      const std::string node = missing;
      job->awaiting.clear();
      Fail(job, what, /*fatal=*/false, now, node);
      changed = true;
      continue;
    }
    if (goodput_ != nullptr && now - job->last_progress_push >= absl::Seconds(1)) {
      const std::vector<std::string> labels = {id};
      const v1::JobProgress& p = job->status.progress();
      goodput_->WithLabels(labels)->Set(job->recovery.Goodput(now));
      job_step_->WithLabels(labels)->Set(static_cast<double>(p.step()));
      job_tokens_per_second_->WithLabels(labels)->Set(p.tokens_per_second());
      ExportCheckpointSeries(job);
    }
    if (job->progress_dirty && now - job->last_progress_push >= absl::Seconds(1)) {
      v1::WatchJobResponse update = UpdateOf(job->status);
      *update.mutable_progress() = job->status.progress();
      for (auto& [wid, callback] : job->watchers) callback(update);
      job->progress_dirty = false;
      job->last_progress_push = now;
    }
  }
  if (changed) ScheduleLocked();
}

}  // namespace ringmaster::coordinator
