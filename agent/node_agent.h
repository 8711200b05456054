// The agent's core: obeys the coordinator's launch and stop commands, keeps the table of local
// workers (job, generation, rank -> pid), reports their exits, answers the worker API's identity
// checks (fencing stale generations), and proxies rendezvous calls to the coordinator.
//
// Launch is idempotent per (job, generation), and commands run in the order CommandQueue
// (command_queue.h) gives. Workers get the environment WorkerEnv (worker_env.h) builds: torchrun's
// variables, RINGMASTER_*, CUDA_VISIBLE_DEVICES on GPU nodes, PATH and HOME from the agent, the
// job's own `trainer.env`, and RINGMASTER_WORKER_TOKEN (the worker API's proof of identity: 128
// random bits per launch; see worker.proto for what it does and does not stop).
//
// While the node is held as a job's hot spare (PrepareWorkers), the agent keeps standby trainer
// processes started for the job (builtin jobs; NodeAgentOptions::prestart_spares): a launch of
// the job here hands them their ranks instead of starting processes (worker_launcher.h,
// docs/agent.md). They are never workers: not in RunningWorkers() or Register, never reported.
//
// Threading: thread-safe. Commands are carried out on the agent's own executor thread (launches)
// and one thread per stop; exits arrive on the launcher's thread.
// Ownership: owns its WorkerLauncher (made by the factory given) and its coordinator link; the
// metrics, watchdog and clock are borrowed and must outlive it.
// Errors: a command is never refused to the coordinator: what cannot be carried out is reported
// as the ranks' exits (WorkerState.exit_reason). The worker-facing calls return absl::Status as
// each states.
#ifndef RINGMASTER_AGENT_NODE_AGENT_H_
#define RINGMASTER_AGENT_NODE_AGENT_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/command_queue.h"
#include "agent/coordinator_link.h"
#include "agent/exit_reason.h"
#include "agent/local_watchdog.h"
#include "agent/log_retention.h"
#include "agent/oom_kills.h"
#include "agent/rank_metrics.h"
#include "agent/rendezvous_replay.h"
#include "agent/standby_table.h"
#include "agent/worker_launcher.h"
#include "common/clock.h"
#include "common/metrics/metric.h"
#include "proto/ringmaster/v1/agent.pb.h"

namespace ringmaster::agent {

struct NodeAgentOptions {
  std::string node_name;
  std::vector<v1::Device> devices;
  std::string host_address = "127.0.0.1";  // MASTER_ADDR other nodes use for this node.
  std::string metrics_address;
  std::string socket_path;     // The worker API's Unix socket.
  // The report datagram socket (report_socket.h), RINGMASTER_REPORT_SOCKET; empty: none.
  std::string report_socket_path;
  // The Python watch's directory (python_watch_files.h) for Python command jobs (worker_env.h);
  // empty: no job is watched.
  std::string python_watch_dir;
  std::string work_dir;        // Logs go to work_dir/logs/JOB/GENERATION/rank-R.log.
  std::string trainer_binary;  // Program for builtin jobs ("gpt"); empty: builtin jobs fail.
  int64_t max_log_bytes = 64 << 20;
  int64_t log_budget_bytes = 0;  // All workers' logs on this node (log_retention.h); 0: no limit.
  // The workers' oom_score_adj (oom_score.h); unset: the agent's own, inherited.
  std::optional<int> worker_oom_score_adj;
  // Counts the failing exits said to be likely out of memory (oom_kills.h); null: not counted.
  std::shared_ptr<metrics::Counter> oom_kills;
  // Where the kernel's OOM kill counts are read (oom_kills.h: ROOT/proc, ROOT/sys/fs/cgroup).
  std::string system_root = "/";
  // While this node is a job's hot spare (v1.PrepareWorkers), keep standby trainer processes
  // started for it, which a launch of the job here uses instead of starting new ones
  // (docs/agent.md, "Hot spares"). Builtin jobs only.
  bool prestart_spares = true;
  // The agent's bearer token for AgentService.Connect (role `agent` in the coordinator's tokens
  // file, docs/security.md); empty: none sent.
  std::string coordinator_token;
};

class NodeAgent {
 public:
  // `metrics`, `watchdog` and `clock` (the time of the exits and states reported, and of the OOM
  // kill counts' samples) must outlive the agent. `make_launcher` is called once, here, with the
  // callback for the workers' exits; the agent owns the launcher it returns
  // (WorkerSupervisorFactory() in production).
  NodeAgent(NodeAgentOptions options, RankMetrics* metrics, LocalWatchdog* watchdog, Clock* clock,
            const WorkerLauncherFactory& make_launcher);
  ~NodeAgent();

  // Connects to the coordinator over `channel` and starts obeying it.
  void Start(std::shared_ptr<grpc::Channel> channel);
  // Stops every worker (with `grace`) and disconnects.
  void Shutdown(absl::Duration grace);
  // Before a Shutdown, to give the workers time to checkpoint: tells the coordinator this node is
  // leaving (v1.Leaving, so it moves the jobs here elsewhere and places nothing new here),
  // refuses further launches (their ranks exit retryable), and stops every worker with SIGUSR1
  // first (`checkpoint_grace`, then SIGTERM and `grace`), the link still up so that their exits
  // are reported.
  void Leave(absl::Duration checkpoint_grace, absl::Duration grace, const std::string& reason);

  // The link registered anew (a new stream, its RegisterAck read; the link calls it): re-arms
  // the hang reports and step summaries a coordinator that restarted must hear again, stops the
  // standbys, and returns what to write before anything else: the rendezvous requests still
  // unanswered.
  std::vector<v1::AgentMessage> Registered();

  // Handles one command (public for tests; the link calls it): launches and stops are queued for
  // the executor thread, log reads for the log reader's; it does not wait for either.
  void OnCommand(const v1::CoordinatorMessage& message);

  // OK if (job, generation, rank) is a worker currently running here and `token` is the one it
  // was launched with (RINGMASTER_WORKER_TOKEN); FAILED_PRECONDITION ("stale generation ..." /
  // "no worker of job ... runs on this node"), or PERMISSION_DENIED for another token,
  // otherwise.
  absl::Status CheckWorker(const std::string& job_id, int64_t generation, int rank,
                           const std::string& token) const;
  // Whether `token` (non-empty) is the RINGMASTER_WORKER_TOKEN of a worker of `job_id` this agent
  // launched and still lists (running, or exited and not yet forgotten). The worker API tells
  // only such a caller why its identity was refused (WorkerService).
  bool HoldsTokenOf(const std::string& job_id, const std::string& token) const;

  // Proxies a rendezvous call to the coordinator and waits for its answer until `deadline`.
  // UNAVAILABLE if the coordinator cannot be reached by then.
  absl::StatusOr<std::string> Rendezvous(v1::RendezvousRequest request, absl::Time deadline);

  // A running worker's announcement that it is about to exit with `exit_code` because of
  // `reason` (the worker API's ReportExit): its exit report quotes it (WorkerState.exit_reason,
  // exit_reason.h) instead of its last line of output. No effect for a worker not running here.
  void NoteExitAnnounced(const std::string& job_id, int64_t generation, int rank, int exit_code,
                         const std::string& reason);

  // Forwards a worker's link check to the coordinator (queued while disconnected, like exits).
  void ForwardLinkReport(const v1::LinkReport& report);
  // Forwards a worker's failed checkpoint to the coordinator (queued while disconnected, like
  // link reports).
  void ForwardCheckpointFailure(const v1::CheckpointFailure& failure);
  // Whether a link check was requested through this worker (a CheckLinks command) since the last
  // call: true once per request.
  bool TakeLinkCheckRequest(const std::string& job_id, int64_t generation, int rank);

  // Sends summaries and hung-rank reports; called periodically by main.
  void Tick();

  // Removes the oldest logs of workers no longer running here until all fit log_budget_bytes;
  // also done after every launch. Called periodically by main; calls run one at a time.
  LogPruneResult PruneLogs();

  // The Register message for (re)connection: devices, the workers still running (and the ranks
  // whose launch is queued or under way) and the exits reported.
  v1::Register MakeRegister() const;

  // Whether the coordinator stream is up, and how many workers run here.
  bool connected() const { return link_ != nullptr && link_->connected(); }
  int RunningWorkers() const;

 private:
  struct Worker {
    v1::JobGeneration job;
    int rank = 0;
    pid_t pid = 0;
    bool exited = false;
    int device = -1;  // RankAssignment.local_device
    // What the worker said of its exit through the worker API (NoteExitAnnounced), if it did.
    std::optional<ExitAnnouncement> announced;
    // Its RINGMASTER_WORKER_TOKEN: the worker API's calls for it must carry it.
    std::string token;
  };

  void Launch(const v1::LaunchWorkers& launch);
  // Carries out a PrepareWorkers: starts the standbys it asks for (builtin jobs, when
  // options_.prestart_spares), or stops the job's standbys (count 0).
  void Prepare(const v1::PrepareWorkers& prepare);
  // Stops the standbys `pids` (none is a worker); logs failures.
  void StopStandbys(const std::vector<pid_t>& pids, const std::string& why);
  // The workers `stop` names that are still running here.
  std::vector<pid_t> StopTargets(const v1::StopWorkers& stop) const;
  // Stops `pids`, the workers of `stop` (StopTargets), with the graces it gives.
  void StopJob(const v1::StopWorkers& stop, const std::vector<pid_t>& pids);
  // Stops the workers `pids` at once, in parallel (WorkerLauncher::Stop with these graces);
  // logs failures other than a worker already gone.
  void StopInParallel(const std::vector<pid_t>& pids, absl::Duration grace,
                      absl::Duration checkpoint_grace);
  // Serves ReadLog commands one at a time on their own thread (a follow read waits for data).
  void LogReaderLoop();
  v1::LogData ReadLogChunk(const v1::ReadLog& request);
  bool IsRunning(const v1::JobGeneration& job, int rank) const;
  // Runs the coordinator's launch and stop commands off the connection thread, in queue_'s order
  // (command_queue.h). Launches run on this one long-lived thread (a worker's PR_SET_PDEATHSIG
  // follows the thread that forked it); each stop runs on a thread of its own, since it waits up
  // to its graces (a drain's checkpoint grace is minutes).
  void ExecutorLoop();
  // Starts `pids`' stop on a thread of its own, told to queue_ until it ends.
  void StartStopLocked(const v1::StopWorkers& stop, std::vector<pid_t> pids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins the stop threads that have ended (every one when `all`), waiting for them if needed.
  void JoinStops(bool all) ABSL_LOCKS_EXCLUDED(mu_);
  void OnExit(pid_t pid, ExitInfo info);
  // Reports an exit (and remembers it for Register), with `reason` as WorkerState.exit_reason
  // (made one line of at most kExitReasonBytes).
  void ReportExit(const v1::JobGeneration& job, int rank, int pid, ExitInfo info,
                  const std::string& reason);
  absl::StatusOr<LaunchSpec> MakeLaunchSpec(const v1::LaunchWorkers& launch,
                                            const v1::RankAssignment& a) const;

  const NodeAgentOptions options_;
  RankMetrics* const metrics_;
  LocalWatchdog* const watchdog_;
  Clock* const clock_;
  // The kernel's OOM kills, sampled every Tick(): a failing exit soon after one says so.
  OomKillWatch oom_watch_;
  std::unique_ptr<CoordinatorLink> link_;
  std::unique_ptr<WorkerLauncher> launcher_;

  mutable absl::Mutex mu_;
  std::map<pid_t, Worker> workers_ ABSL_GUARDED_BY(mu_);
  // The standbys started for the jobs this node is a spare of (never in workers_).
  StandbyTable standbys_ ABSL_GUARDED_BY(mu_);
  // The launch and stop commands queued and under way, and the latest generation launched per
  // job (for idempotent launches and fencing).
  CommandQueue queue_ ABSL_GUARDED_BY(mu_);
  // The exits reported (ReportExit) of each job's latest generation here, newest last, at most
  // kRememberedExits: Register lists them (exited_workers).
  std::deque<v1::WorkerState> exits_ ABSL_GUARDED_BY(mu_);
  // Link checks requested through a worker here (CheckLinks), not handed out yet: (job,
  // generation, rank). Forgotten with the worker.
  std::set<std::tuple<std::string, int64_t, int>> link_check_requests_ ABSL_GUARDED_BY(mu_);
  // Workers that exited, whose exit ReportExit has not recorded yet: (job, generation, rank).
  std::set<std::tuple<std::string, int64_t, int>> exiting_ ABSL_GUARDED_BY(mu_);
  absl::Mutex prune_mu_;  // one PruneLogs() at a time
  int64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<int64_t, std::optional<v1::RendezvousResponse>> answers_ ABSL_GUARDED_BY(mu_);
  // What a coordinator that restarted hears again after RegisterAck.
  RendezvousReplay rendezvous_replay_ ABSL_GUARDED_BY(mu_);
  // Stops running on their own threads (told to queue_ until the stop has ended: the worker's
  // whole process group is gone): the threads by id, and the ids of those that have ended and
  // wait to be joined.
  std::map<int64_t, std::thread> stop_threads_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> stops_ended_ ABSL_GUARDED_BY(mu_);
  int64_t next_stop_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_workers_ ABSL_GUARDED_BY(mu_) = false;
  // What Leave() said, once it was called: no more launches, and in every Register from then on
  // (MakeRegister).
  std::optional<v1::Leaving> leaving_ ABSL_GUARDED_BY(mu_);
  std::thread executor_;
  std::deque<v1::ReadLog> log_reads_ ABSL_GUARDED_BY(mu_);
  std::thread log_reader_;
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_NODE_AGENT_H_
