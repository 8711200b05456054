#include "agent/worker_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/oom_score.h"
#include "agent/output_tail.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace ringmaster::agent {
namespace {

// How long Stop() waits for a group to empty after SIGKILL before giving up.
constexpr absl::Duration kKillTimeout = absl::Seconds(30);
// Longest pause between two checks of a group's emptiness.
constexpr absl::Duration kMaxPoll = absl::Milliseconds(50);
// How long Stop() waits for the reaper to report an exit once the group is empty.
constexpr absl::Duration kReportTimeout = absl::Seconds(10);
// Bytes one read from a worker's pipe takes, and the most a final drain copies.
constexpr size_t kChunkBytes = 64 << 10;
constexpr size_t kMaxDrainBytes = 4 << 20;

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

ExitInfo ExitInfoFromWaitStatus(int wait_status) {
  ExitInfo info;
  if (WIFEXITED(wait_status)) {
    info.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    info.signal = WTERMSIG(wait_status);
  }
  return info;
}

// Everything the child needs, prepared before fork: after fork the child of a multi-threaded
// process may only make async-signal-safe calls (no allocation, no locks).
struct ChildPlan {
  std::vector<char*> argv;
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  const char* cwd = nullptr;
  int stdin_fd = -1;
  int output_fd = -1;
  int standby_fd = -1;  // a standby's assignment pipe, to be its kStandbyFd; -1: a worker
  pid_t agent = 0;  // getpid() of the agent, taken before fork.
  std::string oom_score_adj;  // written to /proc/self/oom_score_adj; empty: keep the agent's
};

// Fills `plan`'s argv, environment, cwd, agent pid and oom_score_adj from `spec`, which must
// outlive the plan (argv and cwd point into it); the descriptors are the caller's.
void FillPlan(const LaunchSpec& spec, ChildPlan* plan) {
  for (const std::string& arg : spec.argv) plan->argv.push_back(const_cast<char*>(arg.c_str()));
  plan->argv.push_back(nullptr);
  for (const auto& [name, value] : spec.env) plan->env_strings.push_back(name + "=" + value);
  for (std::string& entry : plan->env_strings) plan->envp.push_back(entry.data());
  plan->envp.push_back(nullptr);
  if (!spec.cwd.empty()) plan->cwd = spec.cwd.c_str();
  plan->agent = getpid();
  if (spec.oom_score_adj.has_value()) plan->oom_score_adj = absl::StrCat(*spec.oom_score_adj);
}

// Writes "worker_supervisor: <what> \"<arg>\": <reason>\n" with async-signal-safe calls only.
void ChildError(const char* what, const char* arg, int errnum) {
  const char* reason = strerrordesc_np(errnum);
  auto put = [](const char* text) { WriteAll(STDERR_FILENO, text, strlen(text)); };
  put("worker_supervisor: ");
  put(what);
  put(" \"");
  put(arg);
  put("\": ");
  put(reason != nullptr ? reason : "unknown error");
  put("\n");
}

// Runs in the forked child; never returns.
[[noreturn]] void ExecChild(const ChildPlan& plan) {
  setpgid(0, 0);  // Also done by the parent; whichever runs first wins, the other is harmless.
  // If the agent dies (SIGKILL, OOM), the worker dies with it rather than running on unsupervised
  // beside the generation the coordinator starts elsewhere. The signal follows the thread that
  // forked (the agent's command executor, which outlives its workers). Its own children are not
  // covered: they are orphaned if the agent is killed.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.agent) _exit(127);  // The agent died before prctl took effect.
  // Every signal is blocked (see Launch) until the agent's dispositions are gone, so a signal
  // that arrives now (Stop() right after Launch()) waits, then takes its default action.
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  // Fails for SIGKILL, SIGSTOP and the C library's reserved signals, which is fine.
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Move the descriptors above kStandbyFd first, so that dup2 below cannot clobber one with
  // another even if the agent runs with some of 0, 1, 2 and 3 closed.
  int in = fcntl(plan.stdin_fd, F_DUPFD_CLOEXEC, kStandbyFd + 1);
  int out = fcntl(plan.output_fd, F_DUPFD_CLOEXEC, kStandbyFd + 1);
  int control = plan.standby_fd < 0 ? -1 : fcntl(plan.standby_fd, F_DUPFD_CLOEXEC, kStandbyFd + 1);
  if (in < 0 || out < 0 || dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
      dup2(out, STDERR_FILENO) < 0) {
    _exit(127);  // No way to say why: the log is not connected.
  }
  if (plan.standby_fd >= 0 && (control < 0 || dup2(control, kStandbyFd) < 0)) {
    ChildError("cannot pass the assignment descriptor to", plan.argv[0], errno);
    _exit(127);
  }
  // Descriptors opened elsewhere in the agent without O_CLOEXEC must not leak into workers
  // either. Older kernels lack close_range; then close-on-exec has to do.
  close_range(plan.standby_fd >= 0 ? kStandbyFd + 1 : 3, ~0U, 0);
  if (!plan.oom_score_adj.empty()) {
    const int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, plan.oom_score_adj.data(), plan.oom_score_adj.size()) < 0) {
      ChildError("cannot set oom_score_adj to", plan.oom_score_adj.c_str(), errno);
    }
    if (fd >= 0) close(fd);
  }
  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) {
    ChildError("cannot chdir to", plan.cwd, errno);
    _exit(127);
  }
  execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
  ChildError("cannot exec", plan.argv[0], errno);
  _exit(127);
}

}  // namespace

// What the supervisor knows of one launched worker. All fields are guarded by the supervisor's
// mu_ (a nested struct cannot name it in an annotation).
struct WorkerSupervisor::Worker {
  bool leader_reaped = false;
  bool exit_reported = false;
  bool stop_in_progress = false;
  std::unique_ptr<LogPump> pump;
  std::shared_ptr<OutputTail> tail;  // fed by the pump, read when the exit is reported
  // Taken by the first Stop() before its first signal: the last line of a worker it ends.
  std::optional<std::string> line_before_stop;
  // When the Stop() at work sends SIGTERM and SIGKILL at the latest (see Hurry).
  absl::Time sigterm_by = absl::InfiniteFuture();
  absl::Time sigkill_by = absl::InfiniteFuture();

  // Brings the SIGTERM and SIGKILL forward to when a Stop() called at `now` with these graces
  // would send them, where that is sooner.
  void Hurry(absl::Time now, absl::Duration grace, absl::Duration checkpoint_grace) {
    absl::Time sigterm = now + std::max(checkpoint_grace, absl::ZeroDuration());
    sigterm_by = std::min(sigterm_by, sigterm);
    sigkill_by = std::min(sigkill_by, sigterm + grace);
  }
};

// Copies a worker's pipe into its log file on a thread of its own, rotating the file at
// max_bytes. The thread ends at end of file (every writer closed the pipe) or when Finish() asks.
// The file and its size are touched by that thread only.
class WorkerSupervisor::LogPump {
 public:
  static absl::StatusOr<std::unique_ptr<LogPump>> Start(UniqueFd pipe, const std::string& path,
                                                        int64_t max_bytes,
                                                        std::shared_ptr<OutputTail> tail) {
    UniqueFd file(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!file.valid()) return ErrnoError(errno, absl::StrCat("open ", path));
    struct stat st = {};
    if (fstat(file.get(), &st) != 0) return ErrnoError(errno, absl::StrCat("stat ", path));
    UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake.valid()) return ErrnoError(errno, "eventfd");
    if (fcntl(pipe.get(), F_SETFL, O_NONBLOCK) != 0) return ErrnoError(errno, "fcntl O_NONBLOCK");
    auto pump = std::unique_ptr<LogPump>(new LogPump(
        std::move(pipe), std::move(wake), std::move(file), path, max_bytes, std::move(tail)));
    pump->size_ = st.st_size;
    pump->thread_ = std::thread([p = pump.get()] { p->Run(); });
    return pump;
  }

  ~LogPump() { Finish(); }

  // Copies what the pipe already holds (at most kMaxDrainBytes), then ends the thread and
  // returns. Idempotent.
  void Finish() {
    if (!thread_.joinable()) return;
    uint64_t one = 1;
    // Cannot fail: the counter is far from overflowing.
    (void)!write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }

 private:
  LogPump(UniqueFd pipe, UniqueFd wake, UniqueFd file, std::string path, int64_t max_bytes,
          std::shared_ptr<OutputTail> tail)
      : pipe_(std::move(pipe)),
        wake_(std::move(wake)),
        file_(std::move(file)),
        path_(std::move(path)),
        max_bytes_(max_bytes),
        tail_(std::move(tail)) {}

  void Run() {
    pollfd fds[2] = {{pipe_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    for (;;) {
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        RM_LOG(ERROR) << "log pump for " << path_ << ": poll: " << strerror(errno);
        return;
      }
      if (fds[1].revents != 0) {
        Copy(kMaxDrainBytes);
        return;
      }
      if (fds[0].revents != 0 && !Copy(kChunkBytes)) return;
    }
  }

  // Copies up to `limit` bytes that are in the pipe now. False at end of file.
  bool Copy(size_t limit) {
    char buffer[kChunkBytes];
    for (size_t copied = 0; copied < limit;) {
      ssize_t n = read(pipe_.get(), buffer, sizeof(buffer));
      if (n > 0) {
        Append(buffer, static_cast<size_t>(n));
        copied += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (n < 0) RM_LOG(ERROR) << "log pump for " << path_ << ": read: " << strerror(errno);
      return false;
    }
    return true;
  }

  void Append(const char* data, size_t size) {
    tail_->Add(absl::string_view(data, size));
    while (size > 0) {
      if (size_ > 0 && size_ + static_cast<int64_t>(size) > max_bytes_) Rotate();
      size_t take = std::min<size_t>(size, static_cast<size_t>(max_bytes_ - size_));
      if (file_.valid() && !WriteAll(file_.get(), data, take)) {
        // Keep draining the pipe so the worker never blocks on it; say so once.
        if (!write_failed_) RM_LOG(WARNING) << "cannot write " << path_ << ": " << strerror(errno);
        write_failed_ = true;
      }
      size_ += static_cast<int64_t>(take);
      data += take;
      size -= take;
    }
  }

  void Rotate() {
    file_.reset();
    std::string old = path_ + ".1";
    if (rename(path_.c_str(), old.c_str()) != 0) {
      // The O_TRUNC below still keeps the size bound, at the cost of the older part.
      RM_LOG(WARNING) << "cannot rotate " << path_ << ": " << strerror(errno);
    }
    file_.reset(open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
    if (!file_.valid() && !write_failed_) {
      RM_LOG(WARNING) << "cannot reopen " << path_ << ": " << strerror(errno);
      write_failed_ = true;
    }
    size_ = 0;
  }

  const UniqueFd pipe_;
  const UniqueFd wake_;
  UniqueFd file_;
  const std::string path_;
  const int64_t max_bytes_;
  const std::shared_ptr<OutputTail> tail_;
  int64_t size_ = 0;
  bool write_failed_ = false;
  std::thread thread_;
};

WorkerSupervisor::WorkerSupervisor(ExitCallback on_exit) : on_exit_(std::move(on_exit)) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    // Workers still run and are reported; only their orphans go to init instead of us.
    RM_LOG(ERROR) << "prctl(PR_SET_CHILD_SUBREAPER): " << strerror(errno);
  }
  reaper_ = std::thread([this] { ReapLoop(); });
}

WorkerSupervisor::~WorkerSupervisor() {
  std::vector<pid_t> pids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pid, worker] : workers_) pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    absl::Status stopped = Stop(pid, absl::ZeroDuration());
    // NOT_FOUND: it ended meanwhile. Anything else: nothing more to do than say so.
    if (!stopped.ok() && !absl::IsNotFound(stopped)) {
      RM_LOG(ERROR) << "stop worker " << pid << ": " << stopped;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [pid, standby] : standbys_) kill(-pid, SIGKILL);
    auto reaped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return standbys_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&reaped), kKillTimeout)) {
      RM_LOG(ERROR) << standbys_.size() << " standbys not reaped after SIGKILL";
    }
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_child_ = fork();
    if (wake_child_ == 0) _exit(0);
    if (wake_child_ < 0) {
      // The reaper still ends unless it waits on a child that outlives us (a worker's escaped
      // descendant); then the join below waits for that child.
      RM_LOG(ERROR) << "fork to wake the reaper: " << strerror(errno);
    }
  }
  reaper_.join();
  // Workers whose group survived SIGKILL: their pumps are finished as workers_ is destroyed.
}

absl::StatusOr<pid_t> WorkerSupervisor::Launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("argv must not be empty");
  if (spec.log_path.empty()) return absl::InvalidArgumentError("log_path must not be empty");
  if (spec.max_log_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_log_bytes must be at least 1, got ", spec.max_log_bytes));
  }
  if (spec.oom_score_adj.has_value()) RETURN_IF_ERROR(CheckOomScoreAdj(*spec.oom_score_adj));
  ChildPlan plan;
  FillPlan(spec, &plan);

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoError(errno, "pipe2");
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  UniqueFd dev_null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return ErrnoError(errno, "open /dev/null");
  plan.stdin_fd = dev_null.get();
  plan.output_fd = write_end.get();
  auto tail = std::make_shared<OutputTail>();
  ASSIGN_OR_RETURN(std::unique_ptr<LogPump> pump,
                   LogPump::Start(std::move(read_end), spec.log_path, spec.max_log_bytes, tail));

  std::unique_ptr<LogPump> replaced;  // Finished after the lock is released.
  pid_t pid;
  {
    // Held across fork so that the reaper, which takes the lock before looking a pid up, cannot
    // reap this worker before it is in workers_.
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::FailedPreconditionError("the supervisor is shutting down");
    // The child starts with every signal blocked, so that none reaches it while it still has the
    // agent's signal handlers; it unblocks them once it has reset them.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0) ExecChild(plan);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) return absl::UnavailableError(absl::StrCat("fork: ", strerror(fork_errno)));
    // Fails only if the child already exec'ed (then it did setpgid itself) or is gone.
    setpgid(pid, pid);
    ++launches_;
    std::shared_ptr<Worker>& slot = workers_[pid];
    // The kernel reused the pid of a worker whose group is gone but was not yet removed.
    if (slot != nullptr) replaced = std::move(slot->pump);
    slot = std::make_shared<Worker>();
    slot->pump = std::move(pump);
    slot->tail = std::move(tail);
  }
  return pid;
}

absl::StatusOr<pid_t> WorkerSupervisor::StartStandby(const LaunchSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("argv must not be empty");
  if (spec.oom_score_adj.has_value()) RETURN_IF_ERROR(CheckOomScoreAdj(*spec.oom_score_adj));
  ChildPlan plan;
  FillPlan(spec, &plan);
  int output_fds[2], control_fds[2];
  if (pipe2(output_fds, O_CLOEXEC) != 0) return ErrnoError(errno, "pipe2");
  UniqueFd output_read(output_fds[0]);
  UniqueFd output_write(output_fds[1]);
  if (pipe2(control_fds, O_CLOEXEC) != 0) return ErrnoError(errno, "pipe2");
  UniqueFd control_read(control_fds[0]);
  UniqueFd control_write(control_fds[1]);
  UniqueFd dev_null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return ErrnoError(errno, "open /dev/null");
  plan.stdin_fd = dev_null.get();
  plan.output_fd = output_write.get();
  plan.standby_fd = control_read.get();
  absl::MutexLock lock(&mu_);  // across fork, as in Launch()
  if (stopping_) return absl::FailedPreconditionError("the supervisor is shutting down");
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = fork();
  if (pid == 0) ExecChild(plan);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return absl::UnavailableError(absl::StrCat("fork: ", strerror(fork_errno)));
  setpgid(pid, pid);
  ++launches_;
  Standby& standby = standbys_[pid];
  standby.output = std::move(output_read);
  standby.control = std::move(control_write);
  return pid;
}

absl::Status WorkerSupervisor::ActivateStandby(pid_t pid, const LaunchSpec& spec) {
  if (spec.log_path.empty()) return absl::InvalidArgumentError("log_path must not be empty");
  if (spec.max_log_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_log_bytes must be at least 1, got ", spec.max_log_bytes));
  }
  std::string assignment;
  for (const auto& [name, value] : spec.env) {
    absl::StrAppend(&assignment, name, "=", value);
    assignment.push_back('\0');
  }
  std::unique_ptr<LogPump> replaced;  // Declared before the lock: finished after its release.
  // Held throughout, as Launch() holds it across fork: the reaper cannot take the process for a
  // standby's (unreported) exit once it is a worker, nor miss a worker's exit before it is one.
  absl::MutexLock lock(&mu_);
  auto it = standbys_.find(pid);
  if (it == standbys_.end()) return absl::NotFoundError(absl::StrCat("no standby with pid ", pid));
  if (stopping_) return absl::FailedPreconditionError("the supervisor is shutting down");
  auto tail = std::make_shared<OutputTail>();
  absl::StatusOr<std::unique_ptr<LogPump>> pump =
      LogPump::Start(std::move(it->second.output), spec.log_path, spec.max_log_bytes, tail);
  if (!pump.ok()) {
    kill(-pid, SIGKILL);  // its output pipe is gone: it cannot be used any more
    return pump.status();
  }
  // The standby reads at once; one that does not within the deadline (stopped, hung) is useless.
  const int control = it->second.control.get();
  // Room for the whole assignment where the kernel allows it (a spec of up to 64 KiB rides in
  // it), so that the write below does not wait for the standby to read; a refusal only means
  // the loop waits for it.
  (void)fcntl(control, F_SETPIPE_SZ, static_cast<int>(std::min<size_t>(assignment.size(), 1 << 20)));
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  bool written = fcntl(control, F_SETFL, O_NONBLOCK) == 0;
  for (size_t done = 0; written && done < assignment.size();) {
    const ssize_t n = write(control, assignment.data() + done, assignment.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int wait_ms =
        static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd fd = {control, POLLOUT, 0};
    written = n < 0 && errno == EAGAIN && wait_ms > 0 && poll(&fd, 1, wait_ms) > 0 &&
              (fd.revents & POLLOUT) != 0;
  }
  if (!written) {
    const int write_errno = errno;
    kill(-pid, SIGKILL);  // reaped as a standby: no exit reported
    return absl::UnavailableError(absl::StrCat("standby ", pid, " did not take its assignment: ",
                                               strerror(write_errno)));
  }
  standbys_.erase(it);  // closes the assignment pipe: the standby reads end of file
  std::shared_ptr<Worker>& slot = workers_[pid];
  // An entry left by an earlier process with this pid (the kernel reused it): its pump is
  // finished after the lock is released, as Launch() does.
  if (slot != nullptr) replaced = std::move(slot->pump);
  slot = std::make_shared<Worker>();
  slot->pump = *std::move(pump);
  slot->tail = std::move(tail);
  return absl::OkStatus();
}

absl::Status WorkerSupervisor::StopStandby(pid_t pid) {
  absl::MutexLock lock(&mu_);
  if (!standbys_.count(pid)) return absl::NotFoundError(absl::StrCat("no standby with pid ", pid));
  kill(-pid, SIGKILL);
  auto reaped = [this, pid]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !standbys_.count(pid);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&reaped), kKillTimeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("standby ", pid, " not reaped ", absl::FormatDuration(kKillTimeout),
                     " after SIGKILL"));
  }
  return absl::OkStatus();
}

std::vector<pid_t> WorkerSupervisor::Standbys() const {
  absl::MutexLock lock(&mu_);
  std::vector<pid_t> pids;
  for (const auto& [pid, standby] : standbys_) pids.push_back(pid);
  return pids;
}

absl::Status WorkerSupervisor::Stop(pid_t pid, absl::Duration grace,
                                    absl::Duration checkpoint_grace) {
  std::shared_ptr<Worker> worker;
  std::unique_ptr<LogPump> gone_pump;  // Finished after the lock is released.
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      auto it = workers_.find(pid);
      if (it == workers_.end()) {
        return absl::NotFoundError(absl::StrCat("no worker with pid ", pid));
      }
      worker = it->second;
      if (!worker->stop_in_progress) break;
      // Another Stop() is at work on this worker: hold it to this call's graces, wait for it,
      // then look again.
      worker->Hurry(absl::Now(), grace, checkpoint_grace);
      ++hurries_;
      mu_.Await(absl::Condition(
          +[](Worker* w) { return !w->stop_in_progress; }, worker.get()));
    }
    if (worker->leader_reaped && !GroupAlive(pid)) {
      gone_pump = std::move(worker->pump);
      workers_.erase(pid);
    } else {
      worker->stop_in_progress = true;
      worker->sigterm_by = worker->sigkill_by = absl::InfiniteFuture();
      worker->Hurry(absl::Now(), grace, checkpoint_grace);
      // Before any signal: a hung worker's last line, not its reaction to the stop.
      if (!worker->leader_reaped && !worker->line_before_stop.has_value()) {
        worker->line_before_stop = worker->tail->LastLine();
      }
    }
  }
  if (gone_pump != nullptr) {
    gone_pump->Finish();
    return absl::NotFoundError(absl::StrCat("worker ", pid, " is already gone"));
  }

  // ESRCH from kill() below means the group is already empty, which the waits find out. A
  // stopped (SIGSTOP) group gets its first signal before SIGCONT: pending, it is delivered as the
  // group resumes, before its code runs on (else a hung trainer resumed mid-send writes to a
  // peer's closed socket first, and dies of SIGPIPE rather than of the stop).
  const int first = checkpoint_grace > absl::ZeroDuration() ? SIGUSR1 : SIGTERM;
  kill(-pid, first);
  kill(-pid, SIGCONT);
  bool empty = false;
  if (first == SIGUSR1) {
    empty = WaitGroupEmpty(pid, &worker->sigterm_by);
    if (!empty) {
      RM_LOG(INFO) << "worker " << pid << " still running at the end of its checkpoint grace ("
                   << checkpoint_grace << " after SIGUSR1, or less if a later stop was shorter)"
                   << "; sending SIGTERM";
    }
  }
  if (!empty) {
    if (first != SIGTERM) kill(-pid, SIGTERM);
    empty = WaitGroupEmpty(pid, &worker->sigkill_by);
  }
  if (!empty) {
    RM_LOG(INFO) << "worker " << pid << " still running at the end of its grace (" << grace
                 << " after SIGTERM, or less if a later stop was shorter); killing its group";
    kill(-pid, SIGKILL);
    const absl::Time give_up = absl::Now() + kKillTimeout;
    empty = WaitGroupEmpty(pid, &give_up);
  }

  std::unique_ptr<LogPump> pump;
  {
    absl::MutexLock lock(&mu_);
    worker->stop_in_progress = false;
    if (!empty) {
      return absl::DeadlineExceededError(
          absl::StrCat("process group ", pid, " still has processes ",
                       absl::FormatDuration(kKillTimeout), " after SIGKILL"));
    }
    // The empty group means the reaper took the leader; wait for the report to be done.
    if (!mu_.AwaitWithTimeout(absl::Condition(&worker->exit_reported), kReportTimeout)) {
      RM_LOG(WARNING) << "exit of worker " << pid << " not reported (reaped outside the reaper?)";
    }
    auto it = workers_.find(pid);
    if (it != workers_.end() && it->second == worker) {
      pump = std::move(worker->pump);
      workers_.erase(it);
    }
  }
  if (pump != nullptr) pump->Finish();
  return absl::OkStatus();
}

std::vector<pid_t> WorkerSupervisor::Running() const {
  absl::MutexLock lock(&mu_);
  std::vector<pid_t> pids;
  for (const auto& [pid, worker] : workers_) {
    if (!worker->leader_reaped || GroupAlive(pid)) pids.push_back(pid);
  }
  return pids;
}

void WorkerSupervisor::ReapLoop() {
  for (;;) {
    uint64_t launches;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      launches = launches_;
    }
    int wait_status = 0;
    pid_t pid = waitpid(-1, &wait_status, __WALL);
    if (pid > 0) {
      OnReaped(pid, wait_status);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != ECHILD) RM_LOG(ERROR) << "waitpid: " << strerror(errno);
    // No child to wait for (waitpid would return at once): sleep until a launch or shutdown. A
    // fork after `launches` was read changed the counter, so none is missed.
    absl::MutexLock lock(&mu_);
    auto woken = [this, launches]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || launches_ != launches;
    };
    mu_.Await(absl::Condition(&woken));
  }
  pid_t wake_child;
  {
    absl::MutexLock lock(&mu_);
    wake_child = wake_child_;
  }
  // ECHILD if the loop above reaped it already.
  if (wake_child > 0) waitpid(wake_child, nullptr, __WALL);
}

void WorkerSupervisor::OnReaped(pid_t pid, int wait_status) {
  ExitInfo info = ExitInfoFromWaitStatus(wait_status);
  std::shared_ptr<Worker> worker;
  std::shared_ptr<OutputTail> tail;
  std::vector<std::unique_ptr<LogPump>> gone;
  {
    absl::MutexLock lock(&mu_);
    ++reaps_;
    // A standby that ended before its activation: no worker, nothing to report.
    if (standbys_.erase(pid) > 0) return;
    auto it = workers_.find(pid);
    // A worker whose leader was reaped already is a stale entry for a reused pid.
    if (it != workers_.end() && !it->second->leader_reaped) {
      worker = it->second;
      worker->leader_reaped = true;
      tail = worker->tail;
      // Set only by a Stop() that began before this reap (a leader is reaped once), whether or
      // not that Stop() has seen the group empty yet.
      if (worker->line_before_stop.has_value()) {
        info.stopped = true;
        info.last_line = *worker->line_before_stop;
      }
    }
    gone = TakeGoneLocked();
  }
  // Logs first, so that a worker that left nothing behind has its whole log when reported.
  for (auto& pump : gone) pump->Finish();
  if (worker == nullptr) return;  // A re-parented descendant, or the shutdown wake-up child.
  if (!info.stopped) info.last_line = tail->LastLine();
  on_exit_(pid, info);
  absl::MutexLock lock(&mu_);
  worker->exit_reported = true;
}

std::vector<std::unique_ptr<WorkerSupervisor::LogPump>> WorkerSupervisor::TakeGoneLocked() {
  std::vector<std::unique_ptr<LogPump>> pumps;
  for (auto it = workers_.begin(); it != workers_.end();) {
    Worker& w = *it->second;
    if (w.leader_reaped && !w.stop_in_progress && !GroupAlive(it->first)) {
      pumps.push_back(std::move(w.pump));
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  return pumps;
}

bool WorkerSupervisor::WaitGroupEmpty(pid_t pgid, const absl::Time* deadline) {
  absl::Duration backoff = absl::Milliseconds(1);
  for (;;) {
    uint64_t reaps, hurries;
    absl::Time until;
    {
      absl::MutexLock lock(&mu_);
      reaps = reaps_;
      hurries = hurries_;
      until = *deadline;
    }
    if (!GroupAlive(pgid)) return true;
    absl::Time now = absl::Now();
    if (now >= until) return false;
    absl::MutexLock lock(&mu_);
    auto news = [this, reaps, hurries]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return reaps_ != reaps || hurries_ != hurries;
    };
    mu_.AwaitWithDeadline(absl::Condition(&news), std::min(until, now + backoff));
    backoff = std::min(backoff * 2, kMaxPoll);
  }
}

bool WorkerSupervisor::GroupAlive(pid_t pgid) {
  // EPERM: a process is there but not ours to signal (it changed its user).
  return kill(-pgid, 0) == 0 || errno == EPERM;
}

WorkerLauncherFactory WorkerSupervisorFactory() {
  return [](WorkerLauncher::ExitCallback on_exit) -> std::unique_ptr<WorkerLauncher> {
    return std::make_unique<WorkerSupervisor>(std::move(on_exit));
  };
}

}  // namespace ringmaster::agent
