#include "agent/node_agent.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "agent/exit_reason.h"
#include "agent/worker_env.h"
#include "common/checkpoint_grace.h"
#include "common/logging.h"
#include "common/one_line.h"
#include "common/secret.h"
#include "common/status.h"

namespace ringmaster::agent {
namespace {

v1::AgentMessage WorkerStateMessage(const v1::JobGeneration& job, int rank, int pid,
                                    v1::WorkerPhase phase, absl::Time now) {
  v1::AgentMessage message;
  v1::WorkerState* state = message.mutable_worker_state();
  *state->mutable_job() = job;
  state->set_rank(rank);
  state->set_pid(pid);
  state->set_phase(phase);
  state->set_time_unix_nanos(absl::ToUnixNanos(now));
  return message;
}

// Exits remembered for Register: a node's ranks of its recent jobs' latest generations.
constexpr size_t kRememberedExits = 1024;
}  // namespace

NodeAgent::NodeAgent(NodeAgentOptions options, RankMetrics* metrics, LocalWatchdog* watchdog,
                     Clock* clock, const WorkerLauncherFactory& make_launcher)
    : options_(std::move(options)),
      metrics_(metrics),
      watchdog_(watchdog),
      clock_(clock),
      oom_watch_(options_.system_root, clock) {
  launcher_ = make_launcher([this](pid_t pid, ExitInfo info) { OnExit(pid, info); });
  executor_ = std::thread([this] { ExecutorLoop(); });
  log_reader_ = std::thread([this] { LogReaderLoop(); });
}

NodeAgent::~NodeAgent() { Shutdown(absl::Seconds(5)); }

void NodeAgent::Start(std::shared_ptr<grpc::Channel> channel) {
  link_ = std::make_unique<CoordinatorLink>(
      channel,
      [this] { return MakeRegister(); },
      [this](const v1::CoordinatorMessage& m) { OnCommand(m); },
      [this] { return Registered(); },
      options_.coordinator_token);
  link_->Start();
}

std::vector<v1::AgentMessage> NodeAgent::Registered() {
  // A new stream, registered: a coordinator that restarted may have been told of a hang
  // it did not act on, and the watchdog reports each hang once. (Re-armed here, after the
  // RegisterAck, not for every attempt: while the coordinator is away each attempt would
  // queue every hung rank's report again.)
  watchdog_->ReportHangsAgain();
  // And it knows no rank's numbers until the rank reports again, which one stuck silent
  // never does (rank_metrics.h): each running rank's latest summary goes again (not an
  // exited one's: it would count as heard of, then as a process that stopped reporting).
  std::set<std::pair<std::string, int>> running;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pid, worker] : workers_) {
      running.emplace(worker.job.job_id(), worker.rank);
    }
  }
  metrics_->SummarizeAgain(running);
  // Standbys are not in Register, so a coordinator that restarted (or took this node for
  // lost) knows none of them and might never tell this agent to drop them: they go. (A
  // node still held as a spare is prepared again only when it is next taken as one.)
  std::vector<pid_t> standbys;
  {
    absl::MutexLock lock(&mu_);
    standbys = standbys_.DropAll();
  }
  StopStandbys(standbys, "registered anew with the coordinator");
  std::vector<v1::AgentMessage> again;
  absl::MutexLock lock(&mu_);
  for (v1::RendezvousRequest& r : rendezvous_replay_.ToResend()) {
    *again.emplace_back().mutable_rendezvous() = std::move(r);
  }
  return again;
}

void NodeAgent::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_ || stopping_workers_) return;
    stopping_workers_ = true;  // The executor takes no more commands.
  }
  if (link_ != nullptr) link_->Stop();
  std::vector<pid_t> standbys;
  {
    absl::MutexLock lock(&mu_);
    standbys = standbys_.DropAll();
  }
  StopStandbys(standbys, "the agent is stopping");
  // Workers are stopped while the executor thread, which forked them, still runs: their
  // PR_SET_PDEATHSIG follows that thread and would SIGKILL them, skipping the grace period.
  StopInParallel(launcher_->Running(), grace, absl::ZeroDuration());
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  if (executor_.joinable()) executor_.join();
  JoinStops(/*all=*/true);
  if (log_reader_.joinable()) log_reader_.join();
  launcher_.reset();
}

void NodeAgent::OnCommand(const v1::CoordinatorMessage& message) {
  if (message.has_rendezvous()) {
    absl::MutexLock lock(&mu_);
    auto it = answers_.find(message.rendezvous().request_id());
    if (it != answers_.end()) it->second = message.rendezvous();
    rendezvous_replay_.Answered(message.rendezvous().request_id(), message.rendezvous().code());
    return;
  }
  if (message.has_launch() || message.has_stop() || message.has_prepare()) {
    absl::MutexLock lock(&mu_);
    queue_.Push(message);
  }
  if (message.has_read_log()) {
    absl::MutexLock lock(&mu_);
    log_reads_.push_back(message.read_log());
  }
  if (message.has_check_links()) {
    const v1::CheckLinks& c = message.check_links();
    absl::MutexLock lock(&mu_);
    for (const auto& [pid, w] : workers_) {
      if (!w.exited && w.job.job_id() == c.job().job_id() &&
          w.job.generation() == c.job().generation() && w.rank == c.rank()) {
        link_check_requests_.insert({c.job().job_id(), c.job().generation(), c.rank()});
      }
    }
  }
}

bool NodeAgent::TakeLinkCheckRequest(const std::string& job_id, int64_t generation, int rank) {
  absl::MutexLock lock(&mu_);
  return link_check_requests_.erase({job_id, generation, rank}) > 0;
}

void NodeAgent::ExecutorLoop() {
  for (;;) {
    v1::CoordinatorMessage command;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](NodeAgent* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->mu_) {
            return a->shutting_down_ || !a->stops_ended_.empty() ||
                   (!a->stopping_workers_ && a->queue_.HasReady());
          },
          this));
      if (shutting_down_) return;
      if (!stopping_workers_) {
        // A launch taken is listed by Register from here on, as it was while queued (no moment
        // without it).
        if (std::optional<v1::CoordinatorMessage> next = queue_.TakeReady()) {
          command = *std::move(next);
        }
      }
    }
    JoinStops(/*all=*/false);
    if (command.has_launch()) {
      Launch(command.launch());
      absl::MutexLock lock(&mu_);
      queue_.LaunchDone(command.launch().job());
    }
    if (command.has_prepare()) Prepare(command.prepare());
    if (command.has_stop()) {
      std::vector<pid_t> pids = StopTargets(command.stop());
      absl::MutexLock lock(&mu_);
      if (!pids.empty()) StartStopLocked(command.stop(), std::move(pids));
    }
  }
}

void NodeAgent::StartStopLocked(const v1::StopWorkers& stop, std::vector<pid_t> pids) {
  const int64_t id = next_stop_++;
  std::vector<int> devices;
  for (pid_t pid : pids) {
    auto w = workers_.find(pid);
    if (w != workers_.end()) devices.push_back(w->second.device);
  }
  queue_.StopStarted(stop.job().job_id(), devices);
  stop_threads_[id] = std::thread([this, id, stop, pids = std::move(pids), devices] {
    StopJob(stop, pids);
    absl::MutexLock lock(&mu_);
    queue_.StopEnded(stop.job().job_id(), devices);
    stops_ended_.push_back(id);
  });
}

void NodeAgent::JoinStops(bool all) {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    if (all) {
      for (auto& [id, thread] : stop_threads_) threads.push_back(std::move(thread));
      stop_threads_.clear();
    } else {
      for (int64_t id : stops_ended_) {
        threads.push_back(std::move(stop_threads_[id]));
        stop_threads_.erase(id);
      }
    }
    stops_ended_.clear();
  }
  for (std::thread& t : threads) t.join();
}

void NodeAgent::LogReaderLoop() {
  for (;;) {
    v1::ReadLog request;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](NodeAgent* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->mu_) {
            return a->shutting_down_ || !a->log_reads_.empty();
          },
          this));
      if (shutting_down_) return;
      request = std::move(log_reads_.front());
      log_reads_.pop_front();
    }
    v1::AgentMessage message;
    *message.mutable_log_data() = ReadLogChunk(request);
    if (link_ != nullptr) link_->Send(message);
  }
}

bool NodeAgent::IsRunning(const v1::JobGeneration& job, int rank) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [pid, w] : workers_) {
    if (w.job.job_id() == job.job_id() && w.job.generation() == job.generation() &&
        w.rank == rank) {
      return true;
    }
  }
  return false;
}

v1::LogData NodeAgent::ReadLogChunk(const v1::ReadLog& request) {
  v1::LogData data;
  data.set_request_id(request.request_id());
  const std::string path =
      absl::StrCat(options_.work_dir, "/logs/", request.job().job_id(), "/",
                   request.job().generation(), "/rank-", request.rank(), ".log");
  // A follow read polls the file with real sleeps, so it waits on real time, not clock_.
  const absl::Time give_up = absl::Now() + absl::Seconds(std::min(request.wait_seconds(), 10.0));
  for (absl::Duration backoff = absl::Milliseconds(10);; backoff *= 2) {
    std::error_code ec;
    const bool running = IsRunning(request.job(), request.rank());
    const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    if (ec) {
      if (running && absl::Now() < give_up) {
        absl::SleepFor(std::min(backoff, absl::Milliseconds(200)));
        continue;
      }
      data.set_error(absl::StrCat("no log for rank ", request.rank(), " of job ",
                                  request.job().job_id(), " generation ",
                                  request.job().generation(), " on this node"));
      return data;
    }
    int64_t offset = request.offset() < 0 ? std::max<int64_t>(0, size + request.offset())
                                          : std::min<int64_t>(request.offset(), size);
    const int64_t length = std::min<int64_t>(std::max(0, request.max_bytes()), size - offset);
    if (length == 0 && running && absl::Now() < give_up) {
      // Following a live worker: wait (bounded) for it to write more. Its own thread, so this
      // sleep holds up only other log reads.
      absl::SleepFor(std::min(backoff, absl::Milliseconds(200)));
      continue;
    }
    std::string bytes(static_cast<size_t>(length), '\0');
    std::ifstream in(path, std::ios::binary);
    in.seekg(offset);
    in.read(bytes.data(), length);
    bytes.resize(static_cast<size_t>(in.gcount()));
    data.set_data(bytes);
    data.set_next_offset(offset + static_cast<int64_t>(bytes.size()));
    data.set_eof(!running && data.next_offset() >= size);
    return data;
  }
}

absl::StatusOr<LaunchSpec> NodeAgent::MakeLaunchSpec(const v1::LaunchWorkers& launch,
                                                     const v1::RankAssignment& a) const {
  LaunchSpec ls;
  ls.oom_score_adj = options_.worker_oom_score_adj;
  ASSIGN_OR_RETURN(ls.argv, WorkerArgv(launch.spec(), options_.trainer_binary));
  ASSIGN_OR_RETURN(const std::string token, NewSecret());
  WorkerEnvOptions node;
  node.node_name = options_.node_name;
  node.host_address = options_.host_address;
  node.socket_path = options_.socket_path;
  node.report_socket_path = options_.report_socket_path;
  node.python_watch_dir = options_.python_watch_dir;
  node.devices = options_.devices;
  node.inherited = AgentEnvironment();
  ls.env = WorkerEnv(launch, a, node, token);
  std::string dir = absl::StrCat(options_.work_dir, "/logs/", launch.job().job_id(), "/",
                                 launch.job().generation());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  ls.log_path = absl::StrCat(dir, "/rank-", a.rank(), ".log");
  ls.max_log_bytes = options_.max_log_bytes;
  return ls;
}

void NodeAgent::Leave(absl::Duration checkpoint_grace, absl::Duration grace,
                      const std::string& reason) {
  v1::AgentMessage message;
  message.mutable_leaving()->set_checkpoint_grace_seconds(absl::ToDoubleSeconds(checkpoint_grace));
  message.mutable_leaving()->set_reason(reason);
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_ || stopping_workers_ || leaving_.has_value()) return;
    leaving_ = message.leaving();
  }
  RM_LOG(INFO) << "leaving (" << reason << "): workers get up to " << checkpoint_grace
               << " to checkpoint and exit";
  if (link_ != nullptr) link_->Send(message);
  std::vector<pid_t> standbys;
  {
    absl::MutexLock lock(&mu_);
    standbys = standbys_.DropAll();
  }
  StopStandbys(standbys, "the node is leaving");
  StopInParallel(launcher_->Running(), grace, checkpoint_grace);
}

void NodeAgent::StopInParallel(const std::vector<pid_t>& pids, absl::Duration grace,
                               absl::Duration checkpoint_grace) {
  std::vector<std::thread> stops;
  for (pid_t pid : pids) {
    stops.emplace_back([this, pid, grace, checkpoint_grace] {
      absl::Status s = launcher_->Stop(pid, grace, checkpoint_grace);
      if (!s.ok() && !absl::IsNotFound(s)) RM_LOG(WARNING) << "stop " << pid << ": " << s;
    });
  }
  for (auto& t : stops) t.join();
}

void NodeAgent::Launch(const v1::LaunchWorkers& launch) {
  const v1::JobGeneration& job = launch.job();
  bool leaving = false;
  {
    absl::MutexLock lock(&mu_);
    leaving = leaving_.has_value();
  }
  if (leaving) {  // sent before the coordinator learnt of it: the job must go elsewhere
    RM_LOG(WARNING) << "not launching " << job.job_id() << " generation " << job.generation()
                    << ": this node is leaving";
    for (const v1::RankAssignment& a : launch.assignments()) {
      ReportExit(job, a.rank(), 0, ExitInfo{kExitRetryable, 0},
                 "not launched: the node is leaving");
    }
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.AcceptLaunch(job)) return;  // Repeat or stale.
    // The older generations' exits and rendezvous keys concern the coordinator no more.
    rendezvous_replay_.NewGeneration(job.job_id(), job.generation());
    exits_.erase(std::remove_if(exits_.begin(), exits_.end(),
                                [&](const v1::WorkerState& e) {
                                  return e.job().job_id() == job.job_id() &&
                                         e.job().generation() < job.generation();
                                }),
                 exits_.end());
  }
  // Older generations of the job still here are stopped first (normally StopWorkers did it).
  v1::StopWorkers older;
  *older.mutable_job() = job;
  older.mutable_job()->set_generation(job.generation() - 1);
  older.set_grace_seconds(5);
  StopJob(older, StopTargets(older));
  if (absl::Status launchable = CheckLaunchable(launch); !launchable.ok()) {
    // Only this job fails (a restart cannot fix it: fatal); the stream and the node go on.
    RM_LOG(ERROR) << "not launching " << job.job_id() << " generation " << job.generation()
                  << ": " << launchable;
    for (const v1::RankAssignment& a : launch.assignments()) {
      ReportExit(job, a.rank(), 0, ExitInfo{kExitFatal, 0},
                 "cannot launch: " + std::string(launchable.message()));
    }
    return;
  }
  // A baseline of the OOM kill counts from before these workers exist, whatever the last tick saw.
  oom_watch_.Sample();
  {
    absl::MutexLock lock(&mu_);
    standbys_.KeepOnly(launcher_->Standbys());  // those that ended by themselves are of no use
  }
  for (const v1::RankAssignment& a : launch.assignments()) {
    absl::StatusOr<LaunchSpec> spec = MakeLaunchSpec(launch, a);
    absl::StatusOr<pid_t> pid = absl::UnknownError("not launched");
    bool from_standby = false;
    if (!spec.ok()) {
      pid = spec.status();
    } else {
      absl::MutexLock lock(&mu_);  // Held so the exit of a fast worker finds it in workers_.
      // A standby pre-started while this node was the job's spare takes the rank if one of the
      // same program is left; otherwise (or if it cannot take it) a process is started.
      // (Not while stopping: Shutdown() stops the standbys left in the table.)
      if (const pid_t standby = stopping_workers_ ? 0 : standbys_.Take(job.job_id(), spec->argv);
          standby > 0) {
        absl::Status activated = launcher_->ActivateStandby(standby, *spec);
        if (activated.ok()) {
          pid = standby;
          from_standby = true;
        } else {
          RM_LOG(WARNING) << "standby " << standby << " cannot take rank " << a.rank() << " of "
                          << job.job_id() << " (" << activated << "): starting a new process";
        }
      }
      // Shutdown() took its list of workers to stop: one started now would die without a grace.
      if (!from_standby) {
        pid = stopping_workers_ ? absl::UnavailableError("the agent is stopping")
                                : launcher_->Launch(*spec);
      }
      if (pid.ok()) {
        workers_[*pid] = Worker{job, a.rank(), *pid, false, a.local_device()};
        workers_[*pid].token = spec->env["RINGMASTER_WORKER_TOKEN"];
        watchdog_->Track(job.job_id(), job.generation(), a.rank(),
                         AllowancesOf(launch.spec().watchdog()),
                         launch.spec().trainer().has_command()
                             ? LocalWatchdog::WatchFrom::kFirstReport
                             : LocalWatchdog::WatchFrom::kLaunch);
      }
    }
    if (!pid.ok()) {
      RM_LOG(ERROR) << "cannot launch rank " << a.rank() << " of " << job.job_id() << ": "
                    << pid.status();
      ExitInfo info{absl::IsUnavailable(pid.status()) ? kExitRetryable : kExitFatal, 0};
      ReportExit(job, a.rank(), 0, info, "cannot launch: " + pid.status().ToString());
      continue;
    }
    RM_LOG(INFO) << "launched rank " << a.rank() << " of " << job.job_id() << " generation "
                 << job.generation() << " as pid " << *pid
                 << (from_standby ? " (a pre-started standby)" : "");
    if (link_ != nullptr) {
      link_->Send(
          WorkerStateMessage(job, a.rank(), *pid, v1::WORKER_PHASE_STARTING, clock_->Now()));
    }
  }
  // Standbys of the job not used (fewer ranks here, another program) are of no more use: the
  // node runs the job now and is no spare of it.
  std::vector<pid_t> unused;
  {
    absl::MutexLock lock(&mu_);
    unused = standbys_.DropJob(job.job_id());
  }
  StopStandbys(unused, "not needed by the launch");
  PruneLogs();  // A new generation's logs start: make room by the older ones.
}

void NodeAgent::Prepare(const v1::PrepareWorkers& prepare) {
  const std::string& job_id = prepare.job_id();
  std::vector<pid_t> stale;
  bool leaving;
  {
    absl::MutexLock lock(&mu_);
    leaving = leaving_.has_value() || stopping_workers_;
    standbys_.KeepOnly(launcher_->Standbys());
  }
  absl::StatusOr<std::vector<std::string>> argv =
      WorkerArgv(prepare.spec(), options_.trainer_binary);
  v1::LaunchWorkers launch;  // what can be checked of the launch before its ranks are known
  launch.mutable_job()->set_job_id(job_id);
  *launch.mutable_spec() = prepare.spec();
  std::string skip;
  if (prepare.count() <= 0) {
    skip = "the node is no spare of the job any more";
  } else if (prepare.count() > static_cast<int64_t>(options_.devices.size())) {
    skip = absl::StrCat("count ", prepare.count(), " is more than this node's ",
                        options_.devices.size(), " devices");
  } else if (!options_.prestart_spares) {
    skip = "pre-starting is off (--prestart_spares=false)";
  } else if (leaving) {
    skip = "the node is leaving";
  } else if (!prepare.spec().trainer().has_builtin()) {
    skip = "a command job's program is not pre-started";
  } else if (!argv.ok()) {
    skip = std::string(argv.status().message());
  } else if (absl::Status launchable = CheckLaunchable(launch); !launchable.ok()) {
    skip = std::string(launchable.message());
  }
  if (!skip.empty()) {
    {
      absl::MutexLock lock(&mu_);
      stale = standbys_.DropJob(job_id);
    }
    if (prepare.count() > 0) RM_LOG(INFO) << "not pre-starting " << job_id << ": " << skip;
    StopStandbys(stale, skip);
    return;
  }
  int missing;
  {
    absl::MutexLock lock(&mu_);
    stale = standbys_.DropOthers(job_id, *argv);
    missing = prepare.count() - standbys_.Count(job_id, *argv);
  }
  StopStandbys(stale, "another program");
  LaunchSpec spec;
  spec.argv = *argv;
  spec.argv.push_back(absl::StrCat("--standby_fd=", kStandbyFd));
  spec.oom_score_adj = options_.worker_oom_score_adj;
  // What the worker's environment holds before its rank is known: the agent's inherited
  // variables and the job's own (read by libraries as they load, e.g. OPENBLAS_NUM_THREADS). The
  // assignment replaces the whole environment.
  spec.env = AgentEnvironment();
  for (const auto& [name, value] : prepare.spec().trainer().env()) spec.env[name] = value;
  int started = 0;
  for (int i = 0; i < missing; ++i) {
    absl::MutexLock lock(&mu_);
    if (stopping_workers_ || leaving_.has_value()) break;
    absl::StatusOr<pid_t> pid = launcher_->StartStandby(spec);
    if (!pid.ok()) {
      RM_LOG(WARNING) << "cannot pre-start a standby for " << job_id << ": " << pid.status();
      break;
    }
    standbys_.Add(job_id, *argv, *pid);
    ++started;
  }
  if (started > 0) {
    RM_LOG(INFO) << "pre-started " << started << " standby process(es) for " << job_id
                 << " (this node is its spare)";
  }
}

void NodeAgent::StopStandbys(const std::vector<pid_t>& pids, const std::string& why) {
  if (pids.empty()) return;
  RM_LOG(INFO) << "stopping " << pids.size() << " standby process(es): " << why;
  for (pid_t pid : pids) {
    absl::Status s = launcher_->StopStandby(pid);
    if (!s.ok() && !absl::IsNotFound(s)) RM_LOG(WARNING) << "stop standby " << pid << ": " << s;
  }
}

LogPruneResult NodeAgent::PruneLogs() {
  absl::MutexLock prune_lock(&prune_mu_);
  std::set<std::pair<std::string, std::string>> live;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pid, w] : workers_) {
      live.insert({w.job.job_id(), absl::StrCat(w.job.generation())});
    }
    for (const StartingRank& r : queue_.LaunchingRanks()) {
      live.insert({r.job_id, absl::StrCat(r.generation)});
    }
  }
  return agent::PruneLogs(options_.work_dir + "/logs", options_.log_budget_bytes, live);
}

std::vector<pid_t> NodeAgent::StopTargets(const v1::StopWorkers& stop) const {
  std::vector<pid_t> pids;
  absl::MutexLock lock(&mu_);
  for (const auto& [pid, w] : workers_) {
    if (!w.exited && w.job.job_id() == stop.job().job_id() &&
        w.job.generation() <= stop.job().generation()) {
      pids.push_back(pid);
    }
  }
  return pids;
}

void NodeAgent::StopJob(const v1::StopWorkers& stop, const std::vector<pid_t>& pids) {
  if (pids.empty()) return;
  const absl::Duration grace = absl::Seconds(stop.grace_seconds());
  const absl::Duration checkpoint_grace = CheckpointGrace(stop.checkpoint_grace_seconds());
  RM_LOG(INFO) << "stopping " << pids.size() << " workers of " << stop.job().job_id() << ": "
               << stop.reason()
               << (checkpoint_grace > absl::ZeroDuration()
                       ? absl::StrCat(" (SIGUSR1 first: up to ",
                                      absl::FormatDuration(checkpoint_grace),
                                      " to checkpoint and exit)")
                       : "");
  StopInParallel(pids, grace, checkpoint_grace);
}

void NodeAgent::OnExit(pid_t pid, ExitInfo info) {
  Worker worker;
  bool last_of_job = true;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(pid);
    if (it == workers_.end()) return;
    worker = it->second;
    workers_.erase(it);
    // Listed by Register as running until ReportExit records the exit (no moment without it).
    exiting_.insert({worker.job.job_id(), worker.job.generation(), worker.rank});
    link_check_requests_.erase({worker.job.job_id(), worker.job.generation(), worker.rank});
    for (const auto& [other_pid, other] : workers_) {
      if (other.job.job_id() == worker.job.job_id()) last_of_job = false;
    }
  }
  // The rank's last state goes before its exit, so the coordinator sees its final steps.
  std::optional<v1::StepSummary> last =
      metrics_->TakePendingSummary(worker.job.job_id(), worker.rank);
  if (last.has_value() && link_ != nullptr) {
    v1::AgentMessage message;
    *message.mutable_step_summary() = *std::move(last);
    link_->Send(message);
  }
  // Per-rank series of a job that has nothing left on this node are dropped, so the agent's
  // /metrics stays bounded by the ranks it runs.
  if (last_of_job) {
    metrics_->ForgetJob(worker.job.job_id(), worker.job.generation());
    absl::MutexLock lock(&mu_);
    rendezvous_replay_.ForgetThrough(worker.job.job_id(), worker.job.generation());
  }
  watchdog_->Untrack(worker.job.job_id(), worker.job.generation(), worker.rank);
  RM_LOG(INFO) << "rank " << worker.rank << " of " << worker.job.job_id() << " (pid " << pid
               << ") exited: code " << info.exit_code << ", signal " << info.signal;
  // A fatal exit the worker announced (78: the Python watch ended a launcher the rank's command
  // started; a program's ringmaster.worker.exit_reason) stands though the process exits 0: a
  // shell that ran the refused program may go on and exit 0 (`torchrun ... | tee log`).
  if (worker.announced.has_value() && worker.announced->exit_code == kExitFatal &&
      info.exit_code == 0 && info.signal == 0 && !info.stopped) {
    info.exit_code = kExitFatal;
  }
  // A worker the agent stopped ended for that; any other failure may be the OOM killer's.
  const bool failed = info.exit_code != 0 || info.signal != 0;
  const std::string oom = failed && !info.stopped ? oom_watch_.RecentKills() : "";
  if (!oom.empty() && options_.oom_kills != nullptr) options_.oom_kills->Increment();
  ReportExit(worker.job, worker.rank, pid, info, ExitReason(info, worker.announced, oom));
}

void NodeAgent::NoteExitAnnounced(const std::string& job_id, int64_t generation, int rank,
                                  int exit_code, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  for (auto& [pid, w] : workers_) {
    if (!w.exited && w.job.job_id() == job_id && w.job.generation() == generation &&
        w.rank == rank) {
      w.announced = ExitAnnouncement{exit_code, reason};
    }
  }
}

void NodeAgent::ReportExit(const v1::JobGeneration& job, int rank, int pid, ExitInfo info,
                           const std::string& reason) {
  v1::AgentMessage message =
      WorkerStateMessage(job, rank, pid, v1::WORKER_PHASE_EXITED, clock_->Now());
  message.mutable_worker_state()->set_exit_code(info.exit_code);
  message.mutable_worker_state()->set_signal(info.signal);
  message.mutable_worker_state()->set_exit_reason(OneLine(reason, kExitReasonBytes));
  {
    absl::MutexLock lock(&mu_);
    exits_.push_back(message.worker_state());
    if (exits_.size() > kRememberedExits) exits_.pop_front();
    exiting_.erase({job.job_id(), job.generation(), rank});
  }
  if (link_ != nullptr) link_->Send(message);
}

absl::Status NodeAgent::CheckWorker(const std::string& job_id, int64_t generation, int rank,
                                    const std::string& token) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [pid, w] : workers_) {
    if (w.job.job_id() == job_id && w.rank == rank && !w.exited) {
      if (w.job.generation() == generation) {
        if (SameSecret(token, w.token)) return absl::OkStatus();
        return absl::PermissionDeniedError(absl::StrCat(
            "worker.token: must be the RINGMASTER_WORKER_TOKEN the agent launched rank ", rank,
            " of job ", job_id, " with, got ",
            token.empty() ? "none (is the variable missing from the worker's environment, or is "
                            "its client older than the agent?)"
                          : "a different one"));
      }
      return absl::FailedPreconditionError(absl::StrCat("stale generation ", generation, " of job ",
                                                        job_id, " (current ", w.job.generation(),
                                                        ")"));
    }
  }
  const std::optional<int64_t> latest = queue_.LatestGeneration(job_id);
  if (latest.has_value() && *latest != generation) {
    return absl::FailedPreconditionError(absl::StrCat("stale generation ", generation, " of job ",
                                                      job_id, " (current ", *latest, ")"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no worker of job ", job_id, " rank ", rank, " runs on this node"));
}

bool NodeAgent::HoldsTokenOf(const std::string& job_id, const std::string& token) const {
  if (token.empty()) return false;
  absl::MutexLock lock(&mu_);
  for (const auto& [pid, w] : workers_) {
    if (w.job.job_id() == job_id && SameSecret(token, w.token)) return true;
  }
  return false;
}

absl::StatusOr<std::string> NodeAgent::Rendezvous(v1::RendezvousRequest request,
                                                  absl::Time deadline) {
  int64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_request_++;
    answers_[id] = std::nullopt;
    request.set_request_id(id);
    rendezvous_replay_.Sent(request);
  }
  v1::AgentMessage message;
  *message.mutable_rendezvous() = request;
  // Without a link (a test's agent, never started) no answer comes: UNAVAILABLE at the deadline.
  if (link_ != nullptr) link_->Send(message);
  absl::MutexLock lock(&mu_);
  struct Arg {
    NodeAgent* agent;
    int64_t id;
  } arg{this, id};
  bool answered = mu_.AwaitWithDeadline(
      absl::Condition(
          +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return a->agent->shutting_down_ || a->agent->answers_[a->id].has_value();
          },
          &arg),
      deadline + absl::Seconds(1));  // The coordinator answers DEADLINE_EXCEEDED itself.
  std::optional<v1::RendezvousResponse> response = answers_[id];
  answers_.erase(id);
  if (!response.has_value()) rendezvous_replay_.Abandoned(id);
  if (!answered || !response.has_value()) {
    return absl::UnavailableError("no answer from the coordinator for the rendezvous");
  }
  if (response->code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(response->code()), response->message());
  }
  return response->value();
}

void NodeAgent::ForwardLinkReport(const v1::LinkReport& report) {
  if (link_ == nullptr) return;
  v1::AgentMessage message;
  *message.mutable_link_report() = report;
  link_->Send(message);
}

void NodeAgent::ForwardCheckpointFailure(const v1::CheckpointFailure& failure) {
  if (link_ == nullptr) return;
  v1::AgentMessage message;
  *message.mutable_checkpoint_failure() = failure;
  link_->Send(message);
}

void NodeAgent::Tick() {
  oom_watch_.Sample();
  metrics_->Refresh();
  if (link_ == nullptr) return;
  for (v1::StepSummary& summary : metrics_->TakeSummaries()) {
    const std::pair<std::string, int> rank{summary.job().job_id(), summary.rank()};
    v1::AgentMessage message;
    *message.mutable_step_summary() = std::move(summary);
    // Dropped (no stream): its stack, which goes only when it changes, goes with the rank's
    // next summary (rank_metrics.h).
    if (!link_->Send(message)) metrics_->StackUnsent(rank.first, rank.second);
  }
  for (const HungRank& hung : watchdog_->Check()) {
    if (hung.in_collective) {
      RM_LOG(WARNING) << "rank " << hung.rank << " of " << hung.job_id
                      << " waited in a collective that did not move for " << hung.silent
                      << " before its first step (allowed " << hung.allowance << "): hung";
    } else {
      RM_LOG(WARNING) << "rank " << hung.rank << " of " << hung.job_id << " silent for "
                      << hung.silent << " in phase " << v1::WorkerPhase_Name(hung.phase)
                      << " (allowed " << hung.allowance << "): hung";
    }
    v1::JobGeneration job;
    job.set_job_id(hung.job_id);
    job.set_generation(hung.generation);
    v1::AgentMessage message = WorkerStateMessage(job, hung.rank, 0, hung.phase, clock_->Now());
    message.mutable_worker_state()->set_last_report_age_seconds(absl::ToDoubleSeconds(hung.silent));
    message.mutable_worker_state()->set_blocked_in_collective(hung.in_collective);
    link_->Send(message);
  }
}

int NodeAgent::RunningWorkers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

v1::Register NodeAgent::MakeRegister() const {
  v1::Register r;
  r.set_node(options_.node_name);
  for (const auto& d : options_.devices) *r.add_devices() = d;
  r.set_host_address(options_.host_address);
  r.set_metrics_address(options_.metrics_address);
  r.set_version("0.1.0");
  absl::MutexLock lock(&mu_);
  // A leaving node says so in each registration: the coordinator forgets a Leaving with the
  // stream that carried it, and would otherwise place work on the node and count its exit as a
  // loss.
  if (leaving_.has_value()) *r.mutable_leaving() = *leaving_;
  // Each (job, generation, rank) once, as running (pid 0: none yet, or gone) in `phase`.
  std::set<std::tuple<std::string, int64_t, int>> listed;
  auto add = [&](const std::string& job_id, int64_t generation, int rank, pid_t pid,
                 v1::WorkerPhase phase) {
    if (!listed.insert({job_id, generation, rank}).second) return;
    v1::WorkerState* s = r.add_running_workers();
    s->mutable_job()->set_job_id(job_id);
    s->mutable_job()->set_generation(generation);
    s->set_rank(rank);
    s->set_pid(pid);
    s->set_phase(phase);
  };
  for (const auto& [pid, w] : workers_) {
    if (!w.exited) add(w.job.job_id(), w.job.generation(), w.rank, pid, v1::WORKER_PHASE_STEP);
  }
  // Ranks whose launch is queued or under way count as running (STARTING, no pid yet): the
  // coordinator takes a rank this node lists neither way for gone.
  for (const StartingRank& s : queue_.LaunchingRanks()) {
    add(s.job_id, s.generation, s.rank, 0, v1::WORKER_PHASE_STARTING);
  }
  // Exited, the exit not recorded yet: still running as far as the coordinator knows; the exit
  // report follows the registration.
  for (const auto& [job_id, generation, rank] : exiting_) {
    add(job_id, generation, rank, 0, v1::WORKER_PHASE_STEP);
  }
  for (const StartingRank& s : queue_.QueuedRanks()) {
    add(s.job_id, s.generation, s.rank, 0, v1::WORKER_PHASE_STARTING);
  }
  for (const v1::WorkerState& exit : exits_) *r.add_exited_workers() = exit;
  return r;
}

}  // namespace ringmaster::agent
