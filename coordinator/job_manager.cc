// JobManager: the job state machine and its store (Recover, Submit, transitions, failures and
// restarts), the queries (Get, List, Watch) and the reaction to worker exits. The other duties
// are in their own files (job_manager_internal.h lists them); the units they use are
// scheduler.h, launch_plan.h, generation_state.h and job_metrics.h.
#include "coordinator/job_manager.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/hash/hash.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/job_state.h"
#include "common/logging.h"
#include "common/one_line.h"
#include "common/proto_edge.h"
#include "common/status.h"
#include "coordinator/job_id.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/planner.h"
#include "coordinator/spec_validation.h"
#include "spec/elastic.h"

namespace ringmaster::coordinator {
namespace {

int64_t UnixNanos(absl::Time t) { return absl::ToUnixNanos(t); }

// `submitted` with its defaults, if it passes the rules of a spec and of paths on the cluster's
// nodes (Submit and Plan judge alike).
absl::StatusOr<v1::JobSpec> Admitted(const v1::JobSpec& submitted) {
  v1::JobSpec spec = submitted;
  ApplyDefaults(&spec);
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  RETURN_IF_ERROR(ValidateClusterPaths(spec));
  return spec;
}

// An elastic job's (min_nodes below nodes) sizes, checked against the planned data-parallel
// degree where the planner chose the layout, and listed in the plan's reasons (`ringctl plan`).
absl::Status ExplainElastic(const v1::JobSpec& spec, v1::PlanExplanation* plan) {
  if (spec::MinNodes(spec) >= spec.nodes()) return absl::OkStatus();
  const int data =
      spec.parallelism().data() > 0 ? spec.parallelism().data() : plan->parallelism().data();
  RETURN_IF_ERROR(spec::CheckReachable(spec, data));
  std::string keeps = "the global batch kept";
  if (spec::KeepsPerReplicaBatch(spec)) {
    const int64_t warmup = spec::ElasticWarmupSteps(spec);
    keeps = absl::StrCat("each replica's batch kept, the learning rate scaled by DP / ", data,
                         warmup > 0 ? absl::StrCat(", ramped over ", warmup, " steps after each "
                                                   "change of DP")
                                    : ", at once");
  }
  plan->add_reasons(absl::StrCat("elastic (min_nodes ", spec.min_nodes(), ", elastic_batch ",
                                 spec::ElasticBatchName(spec), "): reachable sizes ",
                                 spec::DescribeSizes(spec::ReachableSizes(spec, data)), "; ",
                                 keeps));
  return absl::OkStatus();
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

namespace job_manager_internal {

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

std::set<std::string> NodesOf(const v1::JobStatus& status) {
  std::set<std::string> nodes;
  for (const auto& a : status.assignments()) nodes.insert(a.node());
  return nodes;
}

bool RunsOn(const v1::JobStatus& status, const std::string& node) {
  return status.state() == v1::JOB_STATE_RUNNING && NodesOf(status).count(node) > 0;
}

bool RankIsOn(const v1::JobStatus& status, int rank, const std::string& node) {
  return rank >= 0 && rank < status.assignments_size() && status.assignments(rank).node() == node;
}

v1::WatchJobResponse UpdateOf(const v1::JobStatus& status) {
  v1::WatchJobResponse update;
  update.set_state(status.state());
  update.set_generation(status.generation());
  return update;
}

}  // namespace job_manager_internal

using job_manager_internal::DescribeExit;
using job_manager_internal::kHangEvidenceWait;
using job_manager_internal::kPersistRetryInterval;
using job_manager_internal::NodesOf;
using job_manager_internal::RankIsOn;
using job_manager_internal::UpdateOf;

JobManager::JobManager(JobStore* store, NodeManager* nodes, RendezvousManager* rendezvous,
                       AgentCommandSink* agents, Clock* clock, metrics::Registry* registry,
                       JobManagerOptions options)
    : store_(store),
      nodes_(nodes),
      rendezvous_(rendezvous),
      agents_(agents),
      clock_(clock),
      options_(options),
      metrics_(registry),
      started_(clock->Now()) {
  RM_CHECK(options_.events_in_memory >= 1) << "events_in_memory must be at least 1";
  RM_CHECK(options_.max_store_replay >= 1) << "max_store_replay must be at least 1";
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
    if (KeepPreDefaultsOptimizerZeros(job->status.mutable_spec())) {
      RM_LOG(INFO) << "job " << id << ": stored before the optimizer defaults; its absent "
                   << "warmup_steps, weight_decay and clip_grad_norm kept at 0";
      Persist(job.get());
    }
    if (job->status.state() == v1::JOB_STATE_RUNNING) {
      job->gen = GenerationState::Recovered(job->status.assignments_size());
      for (const auto& a : job->status.assignments()) {
        job->gen.awaiting[a.node()].insert(a.rank());
      }
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
    if (job->status.state() == v1::JOB_STATE_RESTARTING &&
        job->status.elastic_wait_until_unix_nanos() > 0) {
      // And an elastic job's wait for a replacement: it shrinks at the same moment.
      job->launch_not_before =
          std::max(job->launch_not_before,
                   absl::FromUnixNanos(job->status.elastic_wait_until_unix_nanos()));
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
    metrics_.CountStoreWriteError();
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
  if (!metrics_.enabled()) return;
  // Called on every state change: an array, not a map, for a coordinator that keeps many jobs.
  JobMetrics::StateCounts counts{};
  for (const auto& [id, job] : jobs_) {
    const int state = job->status.state();
    if (state >= 0 && state < static_cast<int>(counts.size())) ++counts[state];
  }
  metrics_.SetJobsByState(counts);
}

absl::StatusOr<v1::JobStatus> JobManager::Submit(const v1::JobSpec& submitted,
                                                 const std::string& request_id,
                                                 const Caller& caller) {
  ASSIGN_OR_RETURN(const v1::JobSpec spec, Admitted(submitted));
  ASSIGN_OR_RETURN(v1::PlanExplanation plan, coordinator::Plan(spec, PlannerOptionsNow()));
  RETURN_IF_ERROR(ExplainElastic(spec, &plan));

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
  metrics_.CountSubmitted();
  UpdateStateGauges();
  ScheduleLocked();
  return raw->status;
}

absl::StatusOr<v1::PlanJobResponse> JobManager::Plan(const v1::JobSpec& submitted) {
  ASSIGN_OR_RETURN(const v1::JobSpec spec, Admitted(submitted));
  v1::PlanJobResponse response;
  ASSIGN_OR_RETURN(*response.mutable_plan(), coordinator::Plan(spec, PlannerOptionsNow()));
  RETURN_IF_ERROR(ExplainElastic(spec, response.mutable_plan()));
  v1::JobStatus probe;
  *probe.mutable_spec() = spec;
  *probe.mutable_plan() = response.plan();
  const Layout layout = LayoutOf(probe);
  const std::vector<NodeCapacity> free = nodes_->FreeCapacity();
  Hold hold;
  std::set<std::string> settling;
  {
    absl::MutexLock lock(&mu_);
    hold = hold_;
    settling = settling_nodes_;
  }
  // Placed as a new job would be: behind the devices held for the first waiting one, off the
  // nodes settling when the last pass ran while others fit.
  absl::StatusOr<Placement> placement =
      PlaceBehind(free, hold.job_id.empty() ? nullptr : &hold, layout, {}, settling);
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

absl::StatusOr<v1::JobStatus> JobManager::Status(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  Job* job = Find(job_id);
  if (job == nullptr) return NoSuchJob(job_id);
  return job->status;
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
    const std::vector<std::string> activities = job_manager_internal::ActivitiesOf(job->gen, now);
    for (int rank = 0; rank < static_cast<int>(job->gen.rank_step.size()); ++rank) {
      v1::RankLiveState* live = response.add_ranks();
      live->set_rank(rank);
      live->set_step(job->gen.rank_step[rank]);
      auto heard = job->gen.last_heard.find(rank);
      live->set_last_report_age_seconds(
          heard == job->gen.last_heard.end() ? -1 : absl::ToDoubleSeconds(now - heard->second));
      if (job->gen.stragglers != nullptr) {
        live->set_compute_ratio(job->gen.stragglers->ratio(rank));
        live->set_straggler(job->gen.stragglers->flagged(rank));
      }
      live->set_hang_suspect(job->series.hang_suspects.count(rank) > 0);
      live->set_finished(job->gen.finished_ranks.count(rank) > 0);
      if (auto f = job->gen.rank_figures.find(rank); f != job->gen.rank_figures.end()) {
        live->set_step_seconds_p50(f->second.step_seconds_p50());
        live->set_step_seconds_p99(f->second.step_seconds_p99());
        live->set_compute_share(f->second.compute_share());
        live->set_busbw_bytes_per_second(f->second.busbw_bytes_per_second());
        live->set_mfu(f->second.mfu());
      }
      live->set_activity(activities[rank]);
      if (auto stack = job->gen.stacks.find(rank); stack != job->gen.stacks.end()) {
        live->set_stack(stack->second);
      }
    }
  }
  if (job->gen.link_check != nullptr)
    *response.mutable_link_check() = job->gen.link_check->Summarize();
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

absl::Duration JobManager::RestartBackoff(Job* job) {
  const int failures =
      job->status.generation_stepped() ? 0 : job->status.failures_before_a_step() + 1;
  job->status.set_failures_before_a_step(failures);
  return CrashLoopBackoff(failures, options_.restart_backoff, options_.restart_backoff_max);
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
  if (!metrics_.enabled()) return;
  const absl::Time failed = absl::FromUnixNanos(job->status.end_time_unix_nanos());
  const absl::Time until = failed + options_.failed_series_retention;
  if (clock_->Now() >= until) return;
  metrics_.SetFailed(job->status.job_id(), failed, until, &job->series);
}

void JobManager::StartSeries(Job* job) {
  metrics_.StartJob(job->status.job_id(), !job->status.spec().checkpoint().dir().empty());
  // A job launched before (adopted after a coordinator restart): its degrees from its first
  // launch on, as TryPlace sets them at each launch.
  if (job->status.generation() > 0) {
    metrics_.SetDataParallel(job->status.job_id(), LayoutOf(job->status).data,
                             DesiredLayoutOf(job->status).data);
  }
}

void JobManager::ForgetSeries(Job* job) {
  if (!metrics_.enabled()) return;
  job->hang_suspects_until = absl::InfiniteFuture();
  metrics_.ForgetJob(job->status.job_id(), &job->series);
}

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
  metrics_.CountRestart(status.job_id());
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
    if (state.exit_code() == 0 && state.signal() == 0) job->gen.finished_ranks.insert(state.rank());
    job->gen.stacks.erase(state.rank());  // it exited: it stalls nowhere, waits for nothing
    job->gen.input_seconds.erase(state.rank());
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
  job->gen.furthest_step = std::max(job->gen.furthest_step, state.step());
  if (state.phase() != v1::WORKER_PHASE_EXITED) {
    if (state.last_report_age_seconds() <= 0) return;  // A phase change, not a hang report.
    // The agent's watchdog saw no report from the rank beyond its phase's allowance.
    if (JudgeHangReport(job, node, state)) ScheduleLocked();
    return;
  }
  job->gen.stacks.erase(state.rank());  // it exited: it stalls nowhere, waits for nothing
  job->gen.input_seconds.erase(state.rank());
  if (state.exit_code() == 0 && state.signal() == 0) {
    job->gen.finished_ranks.insert(state.rank());
    if (static_cast<int>(job->gen.finished_ranks.size()) == world) {
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

}  // namespace ringmaster::coordinator
