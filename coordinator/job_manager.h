// Jobs: submission, scheduling onto nodes, the state machine, cancellation, watching, and the
// reaction to worker exits and lost nodes.
//
// State machine (every transition is a "state" event, persisted before it is visible):
//   PENDING -> RUNNING -> (RESTARTING -> RUNNING)* -> SUCCEEDED | FAILED | CANCELLED
// PENDING and RESTARTING jobs are placed by Schedule() in submission order when capacity allows;
// until then JobStatus.reason says what is missing. Each (re)launch bumps the generation, opens a
// fresh rendezvous store and sends LaunchWorkers to every node of the placement.
//
// Failures (worker exit != 0, a lost node, a hang): the job's workers are stopped (StopWorkers to
// every node), its devices released, and the job goes RESTARTING while restarts remain
// (spec.restart.max_restarts), else FAILED. Exit code 78 (fatal, see common/status.h) fails the
// job at once. Anything about an older generation is ignored (fenced). A node implicated in two
// failures of the job in a row is excluded from its placements while other capacity exists.
// Cordoned nodes (UpdateNode) get no placements at all, and a drain moves the jobs running on one:
// their workers are asked to checkpoint and exit first, and the next launch waits for that.
// Crash loops back off: after a failure of a generation in which no rank completed a step, the
// next launch waits (nothing after the first such failure in a row, then restart_backoff,
// doubling per further one, at most restart_backoff_max); the wait is in the RESTARTING event
// and JobStatus.reason. A generation that stepped resets the count: a job that trains between
// its failures restarts at once.
//
// Watchdog (from the agents' step summaries and hang reports):
//  - hangs: an agent reports a rank silent beyond its phase's allowance; the rank(s) to blame
//    are those whose process stopped reporting while their peers report, else those that never
//    entered the collective their group waits in (hang_analysis.h, from the last collective
//    sequence numbers); the "hang" event and ringmaster_hang_suspect{rank} name them; as the
//    agents stop them, a "suspect_exit" event each says why they ended (for a stopped worker that
//    announced nothing: the last line it printed before the stop, what it was doing);
//  - stragglers: straggler_detector.h per pipeline stage (its data- and tensor-parallel
//    ranks together; a stage's only rank, in a pure pipeline, by its slowdown since warm-up
//    against the other stages'; a one-rank job is not judged), with the job's
//    watchdog.straggler_threshold; "straggler" events (flagged and cleared) and
//    ringmaster_straggler{rank}; no restart;
//  - recoveries: recovery_tracker.h; a "recovered" event and ringmaster_recovery_seconds{phase}
//    once every rank of the new generation has stepped; ringmaster_goodput_ratio. When the new
//    generation resumed behind the step its predecessor had trained to, the event says how many
//    trained steps were lost and why (checkpointing off, no checkpoint yet, saves failing);
//  - checkpoints (job_manager_checkpoints.cc): a checkpoint a rank could not save is counted
//    once (ringmaster_job_checkpoint_failures_total) and is a "checkpoint_failed" event when it
//    is the first since the newest committed checkpoint, its error differs in kind from the
//    previous one, or it is the 10th, 100th, ... in a row; a commit after failures is a
//    "checkpoint" event. For a job with checkpointing on, ringmaster_job_steps_since_checkpoint
//    and ringmaster_job_checkpoint_interval_steps feed RingmasterCheckpointMissing (a job
//    that should have checkpointed and did not), from its start.
// Job-level series are removed when the job ends (bounded cardinality), but for a job that failed
// for good, whose ringmaster_job_failed_timestamp_seconds a failure starts (RingmasterJobFailed):
// it goes `failed_series_retention` (an hour) after the failure, and a restarted coordinator
// exports it again for what is left of that time.
//
// Durability: jobs, events, generations and assignments go to the JobStore on every transition;
// progress (step, loss) is in memory only; memory holds each job's newest events
// (events_in_memory), the store all of them. Recover() reloads the jobs (with their newest
// events) after a restart; running
// jobs are then reconciled with the agents as they re-register (RegisterNode).
//
// Where it lives: JobManager coordinates units that each have an interface of their own
// (scheduler.h: a scheduling pass's placements and holds; launch_plan.h: a generation's launch
// messages; generation_state.h: what a launch resets; job_metrics.h: the metric families and
// each job's series). Its own methods are split by duty over job_manager.cc (state machine,
// submissions, queries, worker exits), job_manager_tick.cc (Tick), job_manager_scheduling.cc,
// job_manager_nodes.cc (node loss, drains, registrations), job_manager_watchdog.cc,
// job_manager_links.cc, job_manager_checkpoints.cc, job_manager_elastic.cc (growing a shrunk
// elastic job back) and job_manager_spares.cc (hot spares).
//
// Thread-safe. Watch callbacks and AgentCommandSink::Send are called with the manager's lock
// held, which keeps every watch's updates in order: they must only queue (never block, never call
// back into the manager).
#ifndef RINGMASTER_COORDINATOR_JOB_MANAGER_H_
#define RINGMASTER_COORDINATOR_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/metrics/registry.h"
#include "coordinator/agent_command_sink.h"
#include "coordinator/caller.h"
#include "coordinator/job_metrics.h"
#include "coordinator/job_store.h"
#include "coordinator/node_manager.h"
#include "coordinator/placement.h"
#include "coordinator/planner.h"
#include "coordinator/rendezvous_manager.h"
#include "coordinator/scheduler.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {

struct JobManagerOptions {
  // Seconds between SIGTERM and SIGKILL when stopping workers.
  double stop_grace_seconds = 10;
  // A drain first asks the job's workers to checkpoint and exit (SIGUSR1) and gives them this
  // long before the SIGTERM; the next launch waits for their exits. 0: stop at once, resume from
  // the last periodic checkpoint.
  double drain_checkpoint_grace_seconds = 120;
  // First port of the range MASTER_PORT is chosen from (per job and generation).
  int master_port_base = 29500;
  // Memory of one device for the planner; 0: the smallest GPU of the live nodes as their agents
  // registered it (NodeManager::SmallestGpuMemory), unknown without GPUs.
  int64_t device_memory_bytes = 0;
  // After a coordinator restart, how long a running job's nodes have to re-register.
  absl::Duration reconcile_timeout = absl::Seconds(10);
  // Crash-loop backoff (see above); zero turns it off.
  absl::Duration restart_backoff = absl::Seconds(1);
  absl::Duration restart_backoff_max = absl::Seconds(60);
  // How long a failed job's ringmaster_job_failed_timestamp_seconds stays (RingmasterJobFailed
  // fires while it does).
  absl::Duration failed_series_retention = absl::Hours(1);
  // How long an ended job (SUCCEEDED, FAILED, CANCELLED) is kept, with its events and request id,
  // after it ended; then Tick deletes it from memory and the store (checked once a minute). Zero
  // keeps every job forever (memory, the store and each tick's work then grow with every job
  // ever submitted).
  absl::Duration ended_job_retention = absl::Hours(24 * 7);
  // Each job's newest events kept in memory, which GetJob returns (with the count of older
  // ones); the store keeps them all, and WatchJob replays the older ones from it. At least 1.
  size_t events_in_memory = 1000;
  // The most events one Watch replays from the store (at least 1); a watch that needs more gets
  // these and RESOURCE_EXHAUSTED saying where to resume (ringctl watch does), so a replay's
  // memory stays bounded.
  size_t max_store_replay = 10000;
  // Scheduling places RESTARTING jobs (past any crash-loop backoff), then PENDING ones, each in
  // submission order. The first of them that does not fit has devices held for it (those
  // nearest to being free that it would run on): PENDING jobs after it do not take them as they
  // free up, so a large job is not starved by smaller ones that keep fitting into what frees
  // (RESTARTING jobs take any free device). false: every job takes whatever is free, in that
  // order.
  bool hold_devices_for_oldest_pending = true;
};

// The longest reason a cancel may give (it is stored in the job's events).
inline constexpr size_t kMaxCancelReasonBytes = 1024;

class JobManager {
 public:
  using WatchCallback = std::function<void(const v1::WatchJobResponse& update)>;

  // All pointers must outlive the manager. `registry` may be null.
  JobManager(JobStore* store, NodeManager* nodes, RendezvousManager* rendezvous,
             AgentCommandSink* agents, Clock* clock, metrics::Registry* registry,
             JobManagerOptions options);
  ~JobManager();

  // Loads every stored job (and exports the failure of a job that failed less than
  // failed_series_retention ago). A stored job with unknown fields (an older coordinator kept
  // them) has them dropped, with a "sanitized" event naming how much. Call once, before serving.
  absl::Status Recover();

  // Validates (INVALID_ARGUMENT listing every problem), plans, stores the job PENDING and tries
  // to schedule it. A repeated non-empty request_id returns the job the first call created.
  absl::StatusOr<v1::JobStatus> Submit(const v1::JobSpec& spec, const std::string& request_id,
                                       const Caller& caller);

  // What Submit would decide, without storing anything.
  absl::StatusOr<v1::PlanJobResponse> Plan(const v1::JobSpec& spec);

  // NOT_FOUND for an unknown id. The job's newest events (events_in_memory) and events_omitted,
  // the count of older ones. A running job's response has each rank's live state (step, time
  // since its last report, straggler and hang-suspect flags).
  absl::StatusOr<v1::GetJobResponse> Get(const std::string& job_id) const;
  // NOT_FOUND for an unknown id. The job's status alone (Get without its events and ranks: what
  // a stream opened on the job needs, for each of many streams).
  absl::StatusOr<v1::JobStatus> Status(const std::string& job_id) const;
  // One page of a listing.
  struct JobPage {
    std::vector<v1::JobStatus> jobs;
    std::string next_page_token;  // empty when no older job matches
  };
  static constexpr int kDefaultListLimit = 100;
  static constexpr int kMaxListLimit = 1000;
  // Newest first, filtered by state (empty = all), at most `limit` jobs (0 = 100, capped at
  // 1000), continuing after `page_token` (a previous page's next_page_token, "SUBMIT_NANOS/JOB_ID"
  // of the last job it listed; empty: from the newest): with the job submitted before that one,
  // or, if it was deleted since, with the first job submitted earlier. INVALID_ARGUMENT naming
  // limit when it is negative, or page_token when it is not such a token.
  absl::StatusOr<JobPage> List(const std::vector<v1::JobState>& states, int limit,
                               const std::string& page_token = "") const;

  // Cancels the job and stops its workers. PERMISSION_DENIED unless the caller owns it or is an
  // admin. Idempotent: a terminal job is returned unchanged.
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id, const std::string& reason,
                                       const Caller& caller);

  // Sends the job's events after `after_sequence`, then every new event and progress change, to
  // `callback` (in order, never concurrently; see the class comment for what it may do). Returns a
  // watch id for Unwatch. NOT_FOUND for an unknown job; INVALID_ARGUMENT for a negative
  // after_sequence. A terminal job's watch gets its events and nothing more. Events older than
  // memory holds come from the store: a store error is returned; past max_store_replay of them,
  // those are sent and RESOURCE_EXHAUSTED says where to resume (no watch is registered).
  absl::StatusOr<uint64_t> Watch(const std::string& job_id, int64_t after_sequence,
                                 WatchCallback callback);
  // Asks a running job's ranks to run the link check again after an upcoming step (v1.CheckLinks):
  // rank 0's agent is told (CheckLinks), and a "link_check" event records the request; the
  // check's reports (LinkReport.step > 0) replace the generation's summary and series, and a
  // "link_check" event says how it went. NOT_FOUND; PERMISSION_DENIED unless the caller owns the
  // job or is an admin; FAILED_PRECONDITION unless it is RUNNING with the link check on, more
  // than one rank, and a generation that has completed a step; UNAVAILABLE when rank 0's node is
  // not connected. The response names the request's event (request_sequence); the verdict's
  // event carries the check's step and the ranks at the ends of the links it names.
  absl::StatusOr<v1::CheckLinksResponse> RequestLinkCheck(const std::string& job_id,
                                                          const Caller& caller);
  void Unwatch(uint64_t watch_id);

  // Cordons, drains or uncordons a node (v1.UpdateNodeRequest; rules in node_update.h). The cordon
  // is stored before it takes effect; NOT_FOUND for a node that is neither registered nor
  // cordoned nor running a job's ranks. A drain restarts every running job with a rank on the node
  // (a "drain" event naming those ranks), without counting it against restart.max_restarts; an
  // uncordon places what now fits.
  absl::StatusOr<v1::UpdateNodeResponse> UpdateNode(const v1::UpdateNodeRequest& request,
                                                    const Caller& caller);

  // Places PENDING and RESTARTING jobs that fit, in submission order.
  void Schedule();

  // Reports from agents. Unknown jobs and stale generations are ignored. A non-exit state with
  // last_report_age_seconds > 0 is the agent watchdog's hang report: the job gets a "hang" event
  // naming the rank and is restarted like after a failure.
  void OnWorkerState(const std::string& node, const v1::WorkerState& state);
  void OnStepSummary(const v1::StepSummary& summary);
  // A rank's link check (its agent forwards it; coordinator/link_analysis.h judges). A link
  // that delivered wrong data gets a "slow_link" event naming its two ranks and nodes as soon as
  // a report says so (that rank exits at once); once every rank of the generation reported, so
  // does each slow link, and the ringmaster_slow_link and
  // ringmaster_link_bandwidth_bytes_per_second series are replaced by the verdict's (they stay
  // until a later check is complete, on request or of a later generation, or the job ends).
  // GetJob answers the latest check's summary (LinkCheckSummary) from its first report on.
  void OnLinkReport(const v1::LinkReport& report);
  // A rank could not save the checkpoint of `failure.step` (its agent forwards it). Counted once
  // per checkpoint (several ranks may report the same one; a report of an older step than the
  // generation's newest counted failure is ignored); the event is throttled (see above). Unknown
  // jobs, jobs not RUNNING and stale generations are ignored.
  void OnCheckpointFailure(const v1::CheckpointFailure& failure);
  // A node was lost: its jobs are failed ranks. Nothing, if it has registered again since.
  void OnNodeLost(const std::string& node);
  // A node's agent is shutting down (the node manager already places nothing there): its running
  // jobs move like for a drain, their workers given the agent's checkpoint grace.
  void OnNodeLeaving(const std::string& node, const v1::Leaving& leaving);
  // A node (re)registered. Registers it with the node manager (its error if the registration is
  // invalid; leaving from then on if the registration says so), calls `registered` with the new
  // session (to attach and acknowledge the stream: the commands reconciling sends go after it; it
  // runs under the job manager's lock and must not call back into the manager), then reconciles
  // (and, for a leaving node, moves its running jobs as OnNodeLeaving does): adopts its workers of
  // current generations, stops the others, handles again the exits it lists (a restarted
  // coordinator learns which ranks had finished), and restarts a running job whose ranks placed
  // on the node it lists neither as running (or starting) nor as exited, unless they finished.
  // All under the job manager's lock, so that no placement runs in between and takes the devices
  // of the workers about to be adopted (a restarted coordinator's nodes come back with nothing
  // held).
  absl::StatusOr<uint64_t> RegisterNode(const v1::Register& registration,
                                        const std::function<void(uint64_t session)>& registered);

  // Periodic work: push progress to watchers (at most once per second per job), fail recovered
  // running jobs whose nodes did not come back within `reconcile_timeout` of Recover(), place
  // restarting jobs whose crash-loop backoff or drain wait has passed, free the devices of a job
  // that ended during a drain's wait once its deadline has passed, remove a failed job's
  // failure series once failed_series_retention has passed, write again the jobs whose store
  // write failed (pausing 1 s, doubling to 30 s, while the store refuses), and once a minute
  // delete up to 500 jobs that ended more than ended_job_retention ago.
  void Tick();

 private:
  struct Job;

  // --- The state machine and its store (job_manager.cc) ---
  Job* Find(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The planner's options: options_.device_memory_bytes, or the smallest GPU registered now.
  PlannerOptions PlannerOptionsNow() const;
  // The job, if `caller` owns it or is an admin: NOT_FOUND, or PERMISSION_DENIED saying "only its
  // owner or an admin may <action>".
  absl::StatusOr<Job*> FindForCaller(const std::string& job_id, const Caller& caller,
                                     const std::string& action) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recover(): drops a stored job's unknown fields (common/proto_edge.h), with an event.
  void SanitizeRecovered(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends an event (not yet persisted) and sends it to the job's watchers.
  v1::JobEvent& AddEvent(Job* job, const std::string& kind, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Changes state with a "state" event, and persists.
  void Transition(Job* job, v1::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the status and the events not yet stored.
  void Persist(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Job* job, v1::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `failed_at`: when the failure happened (for the recovery's detect phase); `node`: the node it
  // is attributed to ("" for none), for exclusion after repeated failures.
  void Fail(Job* job, const std::string& why, bool fatal, absl::Time failed_at,
            const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failure: counts it towards the crash loop (or resets the count if the generation
  // stepped) and returns how long the next launch waits.
  absl::Duration RestartBackoff(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StopWorkers to every node of the job; `checkpoint_grace_seconds` > 0 asks the workers to
  // checkpoint and exit first (v1.StopWorkers).
  void StopWorkers(Job* job, const std::string& reason, double checkpoint_grace_seconds = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the job's workers (for `why`), frees its devices and makes it RESTARTING with
  // `reason` and the state event's `message`; Schedule() launches it again from `not_before`.
  // `failed_at` starts the recovery's measurement.
  void Relaunch(Job* job, const std::string& why, absl::Time failed_at, absl::Time not_before,
                const std::string& reason, const std::string& message,
                double checkpoint_grace_seconds = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnWorkerStateLocked(const std::string& node, const v1::WorkerState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Watch's replay once the events older than memory are read (`older`: those after
  // `after_sequence` up to `replayed`): sends them, then (unless `more_in_store`:
  // RESOURCE_EXHAUSTED) the stored ones in memory after `replayed`, and registers the watch.
  absl::StatusOr<uint64_t> WatchLocked(Job* job, int64_t after_sequence, int64_t replayed,
                                       const std::vector<v1::JobEvent>& older, bool more_in_store,
                                       WatchCallback callback) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ringmaster_jobs{state}, from every job's state.
  void UpdateStateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates the job's counters at 0 (restarts, hangs, resumes behind): on Submit and on Recover for
  // jobs that have not ended.
  void StartSeries(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the job's job-level series, its counters included.
  void ForgetSeries(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Exports ringmaster_job_failed_timestamp_seconds for a job that failed at its end time, until
  // failed_series_retention after it (no series if that is past already).
  void ExportFailure(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Tick's duties (job_manager_tick.cc), in the order Tick calls them. Each returns true
  // when it made something placeable (a wait ended, devices freed, a job failed). ---
  // Deletes the jobs that ended more than ended_job_retention ago (at most once a minute).
  void PruneEndedJobsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes again the jobs whose store write failed (pausing while the store refuses).
  void RetryUnsavedJobs(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes failed jobs' ringmaster_job_failed_timestamp_seconds past failed_series_retention.
  void ExpireFailureSeries(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the crash-loop backoffs and drain waits that are over.
  bool EndLaunchWaits(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the hang suspects' series that outlived their job's recovery.
  void ExpireHangSuspects(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the devices of the ranks of a job that ended during a drain's wait, once its deadline
  // has passed (they were SIGKILLed).
  bool FreeEndedDrains(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Declares the hangs that waited for evidence, once it is in or the wait is over, and judges
  // again the reports the checkpoint rule set aside (GenerationState::set_aside_hangs).
  bool DecidePendingHangs(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A hang report of a running job's current generation: held for evidence
  // (GenerationState::pending_hangs; each rank's own, a report of a rank already held is
  // ignored), or declared now. True if the job failed for it.
  bool JudgeHangReport(Job* job, const std::string& node, const v1::WorkerState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds again the set-aside reports of `job` whose rank stayed silent after the checkpoints
  // ended, and forgets those whose rank stepped on. True if the job failed for one.
  bool RejudgeSetAsideHangs(Job* job, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the recovered running jobs whose nodes did not report their ranks within
  // reconcile_timeout of Recover().
  bool FailUnreconciledJobs(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Running jobs' gauges and watchers' progress, at most once a second per job.
  void PushProgress(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Scheduling (job_manager_scheduling.cc; the pass's decisions are in scheduler.h) ---
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Grows each running elastic job that runs on fewer nodes than it asks for, once its full size
  // fits on the free devices and its own (behind the devices held for the first waiting job), and
  // its generation has stepped: its ranks are asked to checkpoint and exit, as in a drain, and its
  // next launch (TryPlace) takes the full size (job_manager_elastic.cc). Not onto a settling node
  // (settling_, flap_damping.h): a grow that needs one waits, with an "elastic" event naming it;
  // one that fits without is decided, and its launch, like every placement, avoids them.
  void GrowElasticJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pass's grow of `job` to `desired` would fit on `open` only with settling nodes: says so
  // (an "elastic" event, once per set of such nodes). `open` has the job's own nodes.
  void NoteGrowSettling(Job* job, const std::vector<NodeCapacity>& open, const Layout& desired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pass is due: a node settled since the last pass read settling_.
  bool EndSettling(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hot spares (JobSpec.spares; job_manager_spares.cc). After each pass: holds each running
  // job's spares (idle nodes with its devices_per_node free, allocated to "<job id>/spare"),
  // refilled while free nodes allow and let go when it ends; "spare" events say each change.
  // `refill` false (before the pass): only lets go the spares of jobs that ended.
  void HoldSpares(bool refill) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A relaunch's spares: freed just before it is placed, so that it takes them at once.
  struct SpareSwap {
    std::set<std::string> before;     // the previous generation's nodes
    std::vector<std::string> spares;  // its spares, freed
  };
  SpareSwap ReleaseSparesForLaunch(Job* job, SchedulingPass* pass)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the placement: "spare agent-4 replaced agent-1" for each spare the launch took.
  void SparesUsed(Job* job, const SpareSwap& swap) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the pass's HoldSpares: each spare of `swap` that is neither one of the job's nodes nor
  // held for it again (another job took it, another node was held, the job ended) is told to
  // drop its pre-started standbys (PrepareWorkers with count 0).
  void DropReleasedSpares(const Job& job, const SpareSwap& swap) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What took an elastic job's nodes, for its event: the previous generation's nodes now lost or
  // excluded, "node n3 lost, no spare; " (whichever failure the job heard of first), or "".
  std::string ElasticCause(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The previous generation's nodes now lost or excluded, "node n3 lost" each, in its order.
  std::vector<std::string> GoneNodes(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // spec.elastic_wait_seconds (job_manager_elastic.cc): an elastic job relaunched after losing
  // a node (or having one excluded) that does not fit at spec.nodes (`reason`: why) waits that
  // long for a replacement before TryPlace shrinks it. The first call starts the wait: its end
  // goes into status.elastic_wait_until_unix_nanos (stored, so a coordinator restart keeps it)
  // and launch_not_before (so that Tick's EndLaunchWaits runs a pass when it ends), with an
  // "elastic" event and the reason "waiting up to 30s for a replacement for n3 before shrinking
  // (REASON)". True while the wait lasts: TryPlace then tries the full size only (ScheduleLocked
  // tries a job in its wait at each pass, launch_not_before notwithstanding). False when the job
  // does not wait (no elastic_wait, not elastic, first launch, no node lost) or its wait is over.
  bool WaitForReplacement(Job* job, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job is in an elastic wait that has not ended at `now`.
  static bool InElasticWait(const Job& job, absl::Time now);
  // Places the job in `pass` and launches it; when it waits, stores why. True if placed. An
  // elastic job (spec.min_nodes) that does not fit at spec.nodes is placed at the largest
  // smaller size that fits (spec/elastic.h), and back at spec.nodes when it fits again at a later
  // launch; each change is an "elastic" event.
  bool TryPlace(Job* job, SchedulingPass* pass) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the job's next generation on `placement` (its devices allocated): a fresh
  // GenerationState, the RUNNING transition stored, then the launches sent.
  void Launch(Job* job, const Placement& placement) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ringmaster_devices_held for `hold`, replacing the last pass's (hold_).
  void ExportHold(const Hold& hold) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Nodes: loss, drains, registrations (job_manager_nodes.cc) ---
  // Relaunches a running job elsewhere for a drain of `node` (an operator's, or its agent leaving):
  // no failure, no backoff, no restart counted. Its workers are asked to checkpoint and exit
  // first, within `checkpoint_grace_seconds`; the next launch waits for the exits of the ranks on
  // live nodes (JobStatus.stopping_ranks), or until that grace and the stop grace have passed.
  // Until a rank has exited (or that time has passed) its device stays held, so no other job is
  // placed on it.
  void MoveOffNode(Job* job, const std::string& node, const std::string& why,
                   double checkpoint_grace_seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the device of `rank`, one of the job's stopping ranks, held by the job.
  void HoldStoppingDevice(Job* job, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank the drain asked to checkpoint and exit has exited (or its node was lost): its device is
  // freed; once none is left the job may launch again, or ends SUCCEEDED if every rank finished.
  void OnStoppingRankGone(Job* job, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReconcileNodeLocked(const v1::Register& registration) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OnNodeLeaving's work, under the lock (also for a registration that says it is leaving).
  void LeavingLocked(const std::string& node, const v1::Leaving& leaving)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- The watchdog (job_manager_watchdog.cc) ---
  // Watchdog parts of a step summary: stragglers, recovery figures, goodput.
  void Watch(Job* job, const v1::StepSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ranks to blame for a hang: processes that stopped reporting while their peers report;
  // else the laggards of the collective numbers (hang_analysis.h); else none. `description` says
  // why.
  std::vector<int> HangEvidence(const Job& job, std::string* description) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the job for the hang (which `began` then) its agent reported in `state`, naming the
  // ranks HangEvidence() blames, or the reported rank when it blames none (event,
  // ringmaster_hang_suspect).
  void DeclareHang(Job* job, const std::string& node, const v1::WorkerState& state,
                   absl::Time began) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A hang's suspect's exit from the generation that hung (the agents stop it): a "suspect_exit"
  // event with why it ended, once per suspect. Any job state: the job may have relaunched or
  // ended since.
  void QuoteSuspectExit(Job* job, const std::string& node, const v1::WorkerState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the job's ringmaster_hang_suspect series.
  void ClearHangSuspects(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank 0 of the job's new generation resumed from `summary`'s start step, older than the job's
  // newest committed checkpoint when the generation was launched: a "resumed_behind" event saying
  // how much is trained again, and ringmaster_job_resumes_behind_checkpoint_total.
  void NoteResumeBehind(Job* job, const v1::StepSummary& summary)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Link checks (job_manager_links.cc) ---
  // The link check of the job's generation is complete: events and series (OnLinkReport).
  void JudgeLinks(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A "slow_link" event and a ringmaster_slow_link series for one slow or corrupting link.
  void AnnounceLink(Job* job, const v1::LinkState& link) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The automatic link check (link_watch.h): feeds the summary to the job's link watch and sends
  // the check it owes, if any (Watch).
  void WatchLinks(Job* job, const v1::StepSummary& summary) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks rank 0 of the job's generation to start a link check; false if its node is not
  // connected.
  bool SendLinkCheck(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Checkpoints (job_manager_checkpoints.cc) ---
  // What the job's new generation, resuming from `start_step`, lost of what its predecessor had
  // trained (GenerationState::at_launch), and why; "" when nothing.
  std::string StepsLost(const Job& job, int64_t start_step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank reported checkpoint `step` committed, newer than any the job had: a failure streak
  // before it is over (a "checkpoint" event says so).
  void OnCheckpointCommitted(Job* job, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick's checkpoint series of a running job (step, time, steps since, interval).
  void ExportCheckpointSeries(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore* const store_;
  NodeManager* const nodes_;
  RendezvousManager* const rendezvous_;
  AgentCommandSink* const agents_;
  Clock* const clock_;
  const JobManagerOptions options_;
  JobMetrics metrics_;
  absl::Time started_;

  mutable absl::Mutex mu_;
  // By id, unordered: order_ has the submission order. Looked up once per job in every pass.
  absl::flat_hash_map<std::string, std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // Job ids in submission order.
  absl::Time next_prune_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Tick's retries of unsaved jobs wait until then after the store refused one.
  absl::Time store_retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration store_retry_pause_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::flat_hash_map<std::string, std::string> requests_ ABSL_GUARDED_BY(mu_);
  Hold hold_ ABSL_GUARDED_BY(mu_);  // as the last scheduling pass left it, for Plan
  // The settling nodes as the last pass read them (no grow or spare goes there), and when the
  // first of them settles (Tick runs a pass then).
  std::map<std::string, NodeManager::Settling> settling_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> settling_nodes_ ABSL_GUARDED_BY(mu_);  // their names: placements avoid them
  absl::Time settled_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::flat_hash_map<uint64_t, std::string> watch_jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_watch_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t id_counter_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_JOB_MANAGER_H_
